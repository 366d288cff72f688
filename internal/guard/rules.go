package guard

import (
	"regexp"
	"sort"
	"strings"
)

// Rule is one kind of secret. Re matches it; when Group > 0 only that
// submatch is the secret (the rest is the context that makes the match
// likely, such as "aws_secret_access_key ="). Allow, when set, exempts a
// matched value (documented example keys).
type Rule struct {
	ID    string
	Re    *regexp.Regexp
	Group int
	Allow func(value string) bool
	// Hint is a literal every match contains, checked first so that text
	// without it costs one substring search instead of a regexp scan.
	Hint string
	// HintFold says Hint is compared case-insensitively.
	HintFold bool
	// Anchors, when set, are the literals the secret starts with: they
	// are found with strings.Index (much faster than a regexp scan), and
	// Re, anchored with ^, runs only at each occurrence not inside a word,
	// where it stops as soon as the text stops matching: linear in the
	// text however many anchors it holds.
	Anchors []string
	// Word lists the characters besides letters and digits that make up
	// the token's word: with TailCheck, a match followed by one is not
	// this secret (a longer word that merely starts like one), and an
	// anchored match must not follow one. Checked here rather than in Re
	// so that the next token's leading boundary is not consumed
	// ("AKIA…,AKIA…" is two keys).
	Word string
	// TailCheck turns the check after the match on.
	TailCheck bool

	// The personal-data rules (PersonalRules) use these instead: Next
	// finds where a candidate starts (Re is anchored there), and where to
	// look next if it fails; Trim may shorten a match or reject it; Valid
	// checks the value (check digits).
	Next  func(s string, from int) (start, resume int)
	Trim  func(s string, start, end int) (int, bool)
	Valid func(value string) bool
}

// exampleKey exempts the keys AWS documents as examples
// (AKIAIOSFODNN7EXAMPLE, wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY): they
// fill documentation and tests and are not credentials.
func exampleKey(v string) bool { return strings.Contains(v, "EXAMPLE") }

// pemLabel is the label of a PEM private key: "PRIVATE KEY", "RSA PRIVATE
// KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "ENCRYPTED PRIVATE KEY",
// "PGP PRIVATE KEY BLOCK".
const pemLabel = `[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?`

// pemEOL ends a line of a PEM block: a newline, or its JSON escape (a key
// inside a JSON string).
const pemEOL = `(?:\r?\n|\\r\\n|\\n)`

// Rules are the secret rules, in the order they are reported. Each is
// written after the token's documented format:
//
//   - private-key: a PEM block whose label ends in PRIVATE KEY, from BEGIN
//     to END (headers such as Proc-Type and DEK-Info included; a hyphen
//     in the body only before a letter or digit, so that the search for
//     END stops at the next "-----" and text full of headers without END
//     is scanned in linear time); a block cut
//     off before its END is matched to the end of its base64 body (its
//     header lines and base64 lines; a blank line then a line of at least
//     16 base64 characters continues it).
//   - aws-access-key: an access key ID, AKIA (long-term) or ASIA
//     (temporary) and the rarer ABIA/ACCA, then 16 base32 characters.
//   - aws-secret-key: 40 base64 characters after a name such as
//     aws_secret_access_key, SecretAccessKey or secret_key (with = or :,
//     quoted or not): without that context 40 base64 characters are
//     anything (a SHA-1 in hex is 40 characters too).
//   - github-token: a classic token (ghp_ personal, gho_ OAuth, ghu_ user
//     to server, ghs_ server to server, ghr_ refresh) with 36 characters,
//     or a fine-grained github_pat_ with 82.
//   - slack-token: xoxb- (bot), xoxa-, xoxp- (user), xoxr- (refresh),
//     xoxs-, with the numeric team/user parts Slack puts first.
//   - google-api-key: AIza and 35 characters.
//   - jwt: a JSON Web Token, header and payload both base64url JSON
//     objects ("eyJ"), signature optional (an unsigned token still carries
//     its claims).
//   - stripe-key: a live secret (sk_live_) or restricted (rk_live_) key.
var Rules = []Rule{
	{ID: "private-key", Hint: "PRIVATE KEY", Re: regexp.MustCompile(
		`-----BEGIN ` + pemLabel + `-----(?:[A-Za-z0-9+/=\r\n\t :,.\\]|-[A-Za-z0-9])*?-----END ` + pemLabel + `-----` +
			`|-----BEGIN ` + pemLabel + `-----(?:` + pemEOL + `(?:[A-Za-z0-9-]+: [^\r\n\\]*|[A-Za-z0-9+/=]+)|` + pemEOL + pemEOL + `[A-Za-z0-9+/=]{16,})+`)},
	{ID: "aws-access-key", Anchors: []string{"AKIA", "ASIA", "ABIA", "ACCA"}, Allow: exampleKey, TailCheck: true, Re: regexp.MustCompile(
		`^(?:AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}`)},
	{ID: "aws-secret-key", Hint: "secret", HintFold: true, Allow: exampleKey, Group: 1, TailCheck: true, Word: "/+=", Re: regexp.MustCompile(
		`(?i:secret_?(?:access_?)?key)["']?\s*[:=]>?\s*["']?([A-Za-z0-9/+]{40})`)},
	{ID: "github-token", Anchors: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"}, TailCheck: true, Word: "_", Re: regexp.MustCompile(
		`^(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82})`)},
	{ID: "slack-token", Anchors: []string{"xoxb-", "xoxa-", "xoxp-", "xoxr-", "xoxs-"}, Word: "-", Re: regexp.MustCompile(
		`^xox[baprs]-[0-9]{6,}-[A-Za-z0-9-]{8,}`)},
	{ID: "google-api-key", Anchors: []string{"AIza"}, TailCheck: true, Word: "_-", Re: regexp.MustCompile(
		`^AIza[0-9A-Za-z_-]{35}`)},
	{ID: "jwt", Anchors: []string{"eyJ"}, Word: "_-", Re: regexp.MustCompile(
		`^eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*`)},
	{ID: "stripe-key", Anchors: []string{"sk_live_", "rk_live_"}, TailCheck: true, Word: "_", Re: regexp.MustCompile(
		`^[sr]k_live_[0-9A-Za-z]{24,}`)},
}

// Match is one secret in a text: the rule and the byte range of the value.
type Match struct {
	Rule       string
	Start, End int
}

// Scan finds the secrets in s, sorted by position and not overlapping:
// where two matches overlap they are merged into one range, named by the
// rule of the one that starts first (the longer on a tie), so that
// redacting the ranges removes every byte any rule matched. Invalid UTF-8
// is scanned as bytes.
func Scan(s string) []Match {
	var ms []Match
	for i := range Rules {
		r := &Rules[i]
		if len(r.Anchors) > 0 {
			ms = r.anchored(s, ms)
			continue
		}
		if r.Hint != "" && !contains(s, r.Hint, r.HintFold) {
			continue
		}
		for _, loc := range r.Re.FindAllStringSubmatchIndex(s, -1) {
			if m, ok := r.match(s, loc, 0); ok {
				ms = append(ms, m)
			}
		}
	}
	return merge(ms)
}

// match turns a submatch index of Re, found in s[off:], into a Match.
func (r *Rule) match(s string, loc []int, off int) (Match, bool) {
	start, end := loc[0], loc[1]
	if r.Group > 0 {
		start, end = loc[2*r.Group], loc[2*r.Group+1]
	}
	if start < 0 {
		return Match{}, false
	}
	start, end = start+off, end+off
	if (r.TailCheck && end < len(s) && continues(s[end], r.Word)) || (r.Allow != nil && r.Allow(s[start:end])) {
		return Match{}, false
	}
	return Match{Rule: r.ID, Start: start, End: end}, true
}

// anchored appends to ms the rule's matches that start at an occurrence
// of one of its anchors.
func (r *Rule) anchored(s string, ms []Match) []Match {
	for _, a := range r.Anchors {
		for from := 0; from < len(s); {
			j := strings.Index(s[from:], a)
			if j < 0 {
				break
			}
			at := from + j
			from = at + len(a)
			if at > 0 && continues(s[at-1], r.Word) {
				continue // inside a word
			}
			if loc := r.Re.FindStringSubmatchIndex(s[at:]); loc != nil {
				if m, ok := r.match(s, loc, at); ok {
					ms = append(ms, m)
					from = max(from, m.End) // an anchor inside a match is the same secret
				}
			}
		}
	}
	return ms
}

func continues(c byte, tail string) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(tail, c) >= 0
}

func contains(s, sub string, fold bool) bool {
	if !fold {
		return strings.Contains(s, sub)
	}
	// The hints are ASCII; a lowercase copy is cheaper than a regexp.
	return strings.Contains(strings.ToLower(s), sub)
}

func merge(ms []Match) []Match {
	if len(ms) < 2 {
		return ms
	}
	sort.SliceStable(ms, func(i, j int) bool {
		if ms[i].Start != ms[j].Start {
			return ms[i].Start < ms[j].Start
		}
		return ms[i].End > ms[j].End
	})
	out := ms[:1]
	for _, m := range ms[1:] {
		last := &out[len(out)-1]
		if m.Start < last.End {
			last.End = max(last.End, m.End)
			continue
		}
		out = append(out, m)
	}
	return out
}

// Marker is what a redacted secret is replaced with.
func Marker(rule string) string { return "[REDACTED:" + rule + "]" }

// RedactText returns s with each match replaced by its Marker.
func RedactText(s string, ms []Match) string {
	if len(ms) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	prev := 0
	for _, m := range ms {
		b.WriteString(s[prev:m.Start])
		b.WriteString(Marker(m.Rule))
		prev = m.End
	}
	b.WriteString(s[prev:])
	return b.String()
}
