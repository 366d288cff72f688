// Package catalog ranks tools for a search query with BM25 over their
// names, titles, descriptions and argument names and descriptions, so an
// agent facing hundreds of tools can find the few it needs.
package catalog

import (
	"encoding/json"
	"math"
	"sort"
	"strings"
	"unicode"
)

// BM25 parameters (the usual defaults).
const (
	k1 = 1.2
	b  = 0.75
)

// Field weights: a word in the tool's name says more than one in a long
// description.
const (
	weightName = 3
	weightText = 1
	weightArgs = 2
)

// Doc is one tool as indexed.
type Doc struct {
	Name        string
	Title       string
	Description string
	// Schema is the tool's input schema (JSON); property names and their
	// descriptions are indexed.
	Schema json.RawMessage
}

// Index is an immutable BM25 index over docs.
type Index struct {
	docs   []Doc
	tf     []map[string]float64
	length []float64
	avgLen float64
	df     map[string]int
}

// New indexes docs.
func New(docs []Doc) *Index {
	ix := &Index{docs: docs, df: map[string]int{}}
	total := 0.0
	for _, d := range docs {
		tf := map[string]float64{}
		add := func(text string, w float64) {
			for _, t := range Tokens(text) {
				tf[t] += w
			}
		}
		add(d.Name, weightName)
		add(d.Title, weightText)
		add(d.Description, weightText)
		for _, a := range argText(d.Schema) {
			add(a.name, weightArgs)
			add(a.desc, weightText)
		}
		l := 0.0
		for t, n := range tf {
			l += n
			ix.df[t]++
		}
		ix.tf = append(ix.tf, tf)
		ix.length = append(ix.length, l)
		total += l
	}
	if len(docs) > 0 {
		ix.avgLen = total / float64(len(docs))
	}
	return ix
}

// Hit is a ranked document.
type Hit struct {
	Doc   Doc
	Score float64
}

// Search returns up to limit documents that keep(name) admits, best
// first; documents sharing no word with the query are left out. Ties are
// broken by name, so the order is deterministic.
func (ix *Index) Search(query string, limit int, keep func(name string) bool) []Hit {
	seen := map[string]bool{}
	var terms []string
	add := func(t string) {
		if !seen[t] {
			seen[t] = true
			terms = append(terms, t)
		}
	}
	for _, t := range Tokens(query) {
		add(t)
		// A query says "add", "send" or "remove" where tools say
		// create and delete: expand the verbs tools are named with.
		if v, ok := verbSynonyms[t]; ok {
			add(v)
		}
	}
	n := float64(len(ix.docs))
	var hits []Hit
	for i, d := range ix.docs {
		if keep != nil && !keep(d.Name) {
			continue
		}
		score := 0.0
		for _, t := range terms {
			f := ix.tf[i][t]
			if f == 0 {
				continue
			}
			df := float64(ix.df[t])
			idf := math.Log(1 + (n-df+0.5)/(df+0.5))
			score += idf * f * (k1 + 1) / (f + k1*(1-b+b*ix.length[i]/ix.avgLen))
		}
		if score > 0 {
			hits = append(hits, Hit{Doc: d, Score: score})
		}
	}
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Doc.Name < hits[j].Doc.Name
	})
	if limit > 0 && len(hits) > limit {
		hits = hits[:limit]
	}
	return hits
}

type arg struct{ name, desc string }

// argText lists the top-level properties of a JSON schema.
func argText(schema json.RawMessage) []arg {
	if len(schema) == 0 {
		return nil
	}
	var s struct {
		Properties map[string]struct {
			Description string `json:"description"`
		} `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil {
		return nil
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]arg, 0, len(names))
	for _, n := range names {
		out = append(out, arg{name: n, desc: s.Properties[n].Description})
	}
	return out
}

// verbSynonyms map the words people use for an action to the verb tool
// names use (create, delete, update, get, list), so "send an email" finds
// create_email. Query side only: tool text is indexed as written.
var verbSynonyms = map[string]string{
	"add": "create", "new": "create", "make": "create", "open": "create", "post": "create", "send": "create", "publish": "create",
	"insert": "create", "upload": "create", "book": "create", "file": "create", "schedule": "create", "generate": "create",
	"take": "create", "invite": "create", "save": "create", "issue": "create", "write": "create", "start": "create",
	"remove": "delete", "drop": "delete", "cancel": "delete", "destroy": "delete", "empty": "delete", "erase": "delete", "purge": "delete",
	"edit": "update", "change": "update", "modify": "update", "set": "update", "rename": "update", "scale": "update",
	"reschedule": "update", "turn": "update", "enable": "update", "disable": "update",
	"show": "get", "read": "get", "look": "get", "fetch": "get", "describe": "get", "detail": "get", "check": "get", "view": "get", "find": "get",
	"all": "list", "which": "list", "enumerate": "list", "browse": "list",
}

// stop are words too common in tool descriptions to tell tools apart.
var stop = map[string]bool{
	"a": true, "an": true, "the": true, "of": true, "to": true, "in": true, "on": true, "for": true, "and": true,
	"or": true, "by": true, "with": true, "from": true, "is": true, "it": true, "its": true, "this": true, "that": true,
	"be": true, "as": true, "at": true, "into": true, "me": true, "my": true, "i": true, "want": true, "please": true,
}

// Tokens splits text into lowercase words: on anything that is not a letter
// or digit, on "__" and "_", and at camelCase humps; stop words are dropped
// and a plural "s" is taken off, so "listIssues" and "list issue" match.
func Tokens(text string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) == 0 {
			return
		}
		w := stem(strings.ToLower(string(cur)))
		cur = cur[:0]
		if w != "" && !stop[w] {
			out = append(out, w)
		}
	}
	rs := []rune(text)
	for i, r := range rs {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			if unicode.IsUpper(r) && i > 0 && unicode.IsLower(rs[i-1]) {
				flush()
			}
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// stem takes off the commonest English inflections.
func stem(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case len(w) > 4 && strings.HasSuffix(w, "sses"):
		return w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us"):
		return w[:len(w)-1]
	}
	return w
}
