package guard

import (
	"encoding/base64"
	"regexp"
	"strings"
	"unicode/utf8"
)

// InjectionPrefix starts the ID of every prompt-injection rule: a finding
// whose rule starts with it says the text tried to instruct the model
// (information-flow labels set task.untrusted from any such finding).
const InjectionPrefix = "injection-"

// The prompt-injection markers (guard.results.injection and
// guard.descriptions.injection): a documented heuristic set, no model.
// Text is first folded (foldText): ASCII letters lowercased; fullwidth
// forms, mathematical alphanumerics and the Cyrillic and Greek letters that
// look like Latin ones mapped to those; zero-width, soft-hyphen and bidi
// characters dropped; '*' and '`' (Markdown emphasis) dropped; every run
// of white space made one space. The phrase rules match the folded text,
// each an RE2 expression anchored at a literal (its Anchors) and run on at
// most phraseWindow bytes from there, so the scan is linear however often
// an anchor repeats:
//
//   - injection-ignore-instructions: "ignore / disregard / forget /
//     override / bypass … previous / prior / above / earlier / original /
//     system … instructions / prompts / rules / guidelines …", "ignore
//     everything above", "disregard the above" (at the end of a sentence
//     or before "and").
//   - injection-role-override: "you are now a(n) … assistant / AI / model
//     …", "you are now DAN / jailbroken / unrestricted / in developer mode
//     / no longer bound", "from now on you are / you will act …", "act as
//     an unrestricted …", "enter / enable developer mode", "pretend you
//     have no rules".
//   - injection-new-instructions: "new / updated / real / secret / hidden
//     … instructions:", "system prompt:", "system override", "begin new
//     instructions".
//   - injection-addressed-to-ai: "note / message / instructions to the AI
//     / assistant / agent / LLM", "if you are an AI / a language model",
//     "AI agents reading this".
//   - injection-conceal-from-user: "do not tell / mention / show … the
//     user", "without telling / informing the user", "the user must not
//     know / see": a tool that asks to be used behind its user's back
//     (the tool-poisoning attacks published against MCP do).
//   - injection-exfiltration-request: an order to send, forward, post,
//     upload or include something private (the conversation, history,
//     API keys, credentials, passwords, secrets, tokens, SSH keys, .env,
//     cookies, files, contents, data) to a URL, an e-mail address or "the
//     address / URL / webhook below".
//   - injection-chat-template: the special tokens of chat templates
//     (<|im_start|>, <|im_end|>, <|system|>, <|eot_id|>,
//     <|start_header_id|>, [INST], <<SYS>>, <start_of_turn> …).
//   - injection-system-impersonation: "[SYSTEM]", "[system message]" (not
//     a Markdown link's text, "[system](…)"),
//     "<system>", "</system>", "<system_prompt>", "<system-reminder>",
//     "<instructions>", "<important>" (the wrapper of published MCP
//     tool-poisoning descriptions).
//   - injection-fake-delimiter: the tags agent frameworks wrap tool output
//     in, which text must not close or open: </tool_result>,
//     <function_results>, </tool_output>, <tool_call>, </user_query>,
//     </assistant>, <human> …, and "end of tool output".
//
// On the text as it came (not folded):
//
//   - injection-invisible-characters: zero-width space, word joiner,
//     invisible operators, Mongolian vowel separator, and zero-width
//     (non-)joiners between ASCII letters
//     or digits (between other letters they are how emoji and Indic and
//     Persian scripts are written).
//   - injection-bidi-control: the bidirectional embeddings, overrides and
//     isolates (U+202A–U+202E, U+2066–U+2069) that make text read
//     otherwise than it is stored ("Trojan Source"); the marks (LRM, RLM,
//     ALM) of ordinary right-to-left text are not.
//   - injection-unicode-tags: the tag characters U+E0000–U+E007F, which
//     no font shows and models read as ASCII ("ASCII smuggling"), except
//     the tag sequence of a subdivision flag emoji (after U+1F3F4).
//   - injection-hidden-html: an HTML comment, or an element styled
//     display:none, visibility:hidden, font-size:0 or opacity:0 (or with
//     the hidden attribute), whose text holds a phrase rule's match or
//     speaks to a model ("AI:", "assistant,", "you must now send …").
//   - injection-encoded-instructions: a run of at least 24 base64
//     characters that decodes to mostly printable text in which a phrase
//     rule matches (decoded once, not recursively; linear).
//   - injection-exfiltration-link: a Markdown image ![…](http…?…) or an
//     <img src="http…?…"> whose query string looks like it carries data:
//     a parameter named like data (data, q, secret, content, message,
//     history, …), a value of 32 or more base64 or hex characters, or a
//     template placeholder ({ } $ < > [ ]). A model that renders it sends
//     the query to the host without a click. Badge parameters
//     (?style=flat) are not.
var InjectionRules = []string{
	"injection-ignore-instructions", "injection-role-override", "injection-new-instructions",
	"injection-addressed-to-ai", "injection-conceal-from-user", "injection-exfiltration-request", "injection-chat-template", "injection-system-impersonation",
	"injection-fake-delimiter", "injection-invisible-characters", "injection-bidi-control",
	"injection-unicode-tags", "injection-hidden-html", "injection-encoded-instructions",
	"injection-exfiltration-link",
}

// phraseRule is a phrase rule: Re, anchored with ^, runs on the folded
// text at each occurrence of one of Anchors (not inside a word, unless
// Inner).
type phraseRule struct {
	id      string
	anchors []string
	inner   bool // the anchor may follow a letter or digit (tokens like <|im_start|>)
	// next, when set, holds the bytes that may follow the anchor, and
	// second the words one of which must follow it and that byte: cheap
	// checks that spare the expression most occurrences of a common word
	// ("new", "true", "</").
	next   string
	second []string
	re     *regexp.Regexp
}

// ignoreSecond are the words that may follow an ignore verb.
var ignoreSecond = []string{"all", "any", "each", "every", "the", "your", "my", "our", "of", "these", "those", "previous", "prior", "above",
	"earlier", "preceding", "former", "original", "initial", "old", "system", "developer", "safety", "foregoing", "aforementioned",
	"everything", "anything"}

// anchored compiles the alternatives of a phrase rule as one expression
// anchored at the start (a "^" in each alternative would leave the whole
// unanchored, tried at every position of the window).
func anchored(alternatives string) *regexp.Regexp {
	return regexp.MustCompile(`^(?:` + alternatives + `)`)
}

// phraseWindow bounds how far a phrase rule reads from its anchor (the
// longest phrase is well under it).
const phraseWindow = 160

const (
	ignoreVerb = `(?:ignore|disregard|forget|override|bypass|abandon)`
	ignoreFill = `(?:(?:all|any|each|every|the|your|my|our|of|these|those|and|or|of the|all of the|any of the),? ){0,4}`
	ignoreAdj  = `(?:previous|previously given|prior|above|earlier|preceding|former|original|initial|old|system|developer|safety|foregoing|aforementioned|above-mentioned)`
	ignoreNoun = `(?:instructions?|prompts?|directives?|rules|guidelines|guidance|commands|orders|constraints|restrictions|guardrails|programming)`
	aiWord     = `(?:ai|a\.i\.|assistant|agent|llm|language model|chatbot|ai model|gpt|chatgpt|claude|copilot|gemini)s?`
)

var phraseRules = []phraseRule{
	{id: "injection-ignore-instructions", anchors: []string{"ignore", "disregard", "forget", "override", "bypass", "abandon"}, next: " ", second: ignoreSecond, re: anchored(
		`` + ignoreVerb + ` ` + ignoreFill + ignoreAdj + `(?:(?: and| or|,) ?` + ignoreAdj + `)? ` + ignoreNoun + `\b` +
			`|` + ignoreVerb + ` (?:all |everything |anything )(?:(?:that |which )?(?:you (?:were|have been|'ve been) |was |i )?(?:said|told|written|given|stated) )?(?:above|before (?:this|that|now)|previously|prior|so far|until now)\b` +
			`|(?:disregard|ignore|forget) (?:all of |everything in )?(?:the|all) above(?: instructions| text| content| and|[.,;:!]| ?$)`)},
	{id: "injection-role-override", anchors: []string{"you are now", "from now on", "act as", "behave as", "respond as", "enter", "enable", "activate", "switch to", "pretend"}, next: " ,", re: anchored(
		`you are now (?:(?:a|an|the|my) (?:[a-z-]+ ){0,2}` + aiWord + `\b|dan\b|in (?:developer|god|admin|debug|jailbreak|unrestricted|dan) mode|jailbroken|unrestricted|unfiltered|uncensored|free (?:of|from) (?:all |any |your )?(?:rules|restrictions|guidelines|constraints)|no longer (?:bound|restricted|limited|an? (?:ai|assistant))|acting as|going to (?:act|pretend|ignore))` +
			`|from now on,? you (?:are|will (?:act|respond|answer|ignore|only|pretend|obey|follow)|must (?:act|respond|answer|ignore|only|pretend|obey|follow))\b` +
			`|(?:act|behave|respond) as (?:if you (?:are|were) )?(?:an? )?(?:unrestricted|unfiltered|jailbroken|uncensored|evil|dan\b)` +
			`|(?:enter|enable|activate|switch to) (?:developer|god|jailbreak|dan|unrestricted) mode\b` +
			`|pretend (?:that )?you (?:are|have) (?:no (?:rules|restrictions|guidelines|limits|filters)|not bound|an? unrestricted)`)},
	{id: "injection-new-instructions", anchors: []string{"new", "updated", "revised", "real", "actual", "true", "secret", "hidden", "urgent", "system", "developer", "begin", "start"}, next: " ",
		second: []string{"system", "instruction", "prompt", "directive", "orders", "override", "of", "new", "your"}, re: anchored(
			`(?:new|updated|revised|real|actual|true|secret|hidden|urgent) (?:system )?(?:instructions?|prompt|directives?|orders) ?:` +
				`|(?:system|developer) (?:prompt|override|instructions?) ?:` +
				`|system override ?:` +
				`|(?:begin|start) (?:of )?(?:new|system|your new) instructions\b`)},
	{id: "injection-addressed-to-ai", anchors: []string{"note", "message", "instruction", "instructions", "attention", "if you are", "dear"}, next: " ", re: anchored(
		`(?:note|message|instructions?|attention) (?:to|for) (?:the |all |any |every )?` + aiWord + `\b` +
			`|if you are an? (?:ai assistant|ai agent|ai|llm|language model|assistant|chatbot|large language model)\b` +
			`|dear (?:ai|llm|assistant|agent|chatbot|language model)s?\b`)},
	{id: "injection-conceal-from-user", anchors: []string{"do not", "don't", "dont", "never", "without", "the user", "the human"}, next: " s", re: anchored(
		`(?:do not|don't|dont|never) (?:tell|mention|inform|notify|reveal|show|disclose|alert|explain)(?: (?:this|it|that|anything))?(?: (?:to|with))? (?:the|your) (?:user|human|operator)s?\b` +
			`|without (?:telling|informing|notifying|alerting|asking|mentioning (?:it |this )?to) (?:the|your) (?:user|human|operator)s?\b` +
			`|the (?:user|human)s? (?:must|should|shall|need) not (?:know|see|notice|be told|find out)\b`)},
	{id: "injection-exfiltration-request", anchors: []string{"send", "forward", "post", "upload", "email", "e-mail", "exfiltrate", "leak", "transmit", "copy", "pass", "include", "append"}, next: " ", re: anchored(
		`(?:send|forward|post|upload|email|e-mail|exfiltrate|leak|transmit|copy|pass|include|append) (?:(?:the|all|any|your|my|this|these|its|user's|users'|of) ){0,3}(?:[a-z_.~/-]+ ){0,2}` +
			`(?:conversation|chat history|history|api keys?|credentials|passwords?|secrets?|tokens?|private keys?|ssh keys?|~/\.ssh\S*|id_rsa|\.env|environment variables|cookies|contents?|data|e-?mails|files?)\b(?: [a-z_.~/-]+){0,3}` +
			` (?:to|into|in) (?:https?://|(?:the )?(?:url|link|address|endpoint|webhook|query string|image url) (?:below|above|here|https?://)|[a-z0-9._%+-]+@[a-z0-9-]+\.[a-z0-9.-]+)`)},
	{id: "injection-chat-template", inner: true, anchors: []string{"<|", "[inst]", "[/inst]", "<<sys>>", "<</sys>>", "<start_of_turn>", "<end_of_turn>"}, re: anchored(
		`<\|(?:im_start|im_end|im_sep|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id|begin_of_text|end_of_text|channel|message|tool|end|fim_prefix|fim_suffix|fim_middle)\|>` +
			`|\[/?inst\]|<</?sys>>|<(?:start|end)_of_turn>`)},
	{id: "injection-system-impersonation", inner: true, anchors: []string{"[system", "<system", "</system", "<instructions>", "</instructions>", "(system message)", "<important>", "</important>"}, re: anchored(
		`\[system(?: (?:message|prompt|note|instruction|instructions|override))?\](?:[^(]|$)` +
			`|</?system(?:[_-](?:prompt|message|reminder|instructions?))? ?>` +
			`|</?instructions>|</?important>|\(system message\)`)},
	{id: "injection-fake-delimiter", inner: true, anchors: []string{"</", "<tool", "<function", "<search", "<human", "<assistant", "<user_", "<untrusted", "end of tool", "end of function"}, next: "tfsuha_ >", re: anchored(
		`</?(?:tool_results?|tool_outputs?|tool_response|tool_use|tool_calls?|function_results?|function_calls?|function_response|search_results?|user_query|user_input|untrusted(?:[_-][a-z]+)?|human|assistant) ?>` +
			`|end of (?:tool|function) (?:output|result|response|call)s?\b`)},
}

// Match spans of the folded text mapped back to the text.

// folded is s folded for the phrase rules: text, and for each of its
// bytes the offset in s of the character it came from (off[len(text)] is
// len(s)).
type folded struct {
	text string
	off  []int32
}

// homoglyphs maps the Cyrillic and Greek letters that look like Latin
// ones to them.
var homoglyphs = map[rune]byte{
	'а': 'a', 'е': 'e', 'о': 'o', 'р': 'p', 'с': 'c', 'у': 'y', 'х': 'x', 'і': 'i', 'ѕ': 's', 'ј': 'j', 'ԁ': 'd', 'ɡ': 'g', 'һ': 'h', 'ӏ': 'l', 'ԛ': 'q', 'ԝ': 'w',
	'А': 'a', 'В': 'b', 'Е': 'e', 'К': 'k', 'М': 'm', 'Н': 'h', 'О': 'o', 'Р': 'p', 'С': 'c', 'Т': 't', 'Х': 'x', 'І': 'i', 'Ј': 'j', 'Ѕ': 's',
	'ο': 'o', 'α': 'a', 'ε': 'e', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ρ': 'p', 'τ': 't', 'υ': 'u',
	'Ο': 'o', 'Α': 'a', 'Ε': 'e', 'Ι': 'i', 'Κ': 'k', 'Μ': 'm', 'Ν': 'n', 'Ρ': 'p', 'Τ': 't', 'Χ': 'x', 'Β': 'b', 'Η': 'h', 'Ζ': 'z', 'Υ': 'y',
}

// dropped are the characters folding removes: invisible or formatting
// only.
func dropped(r rune) bool {
	switch {
	case r == 0x00AD, r == 0x034F, r == 0x061C, r == 0x180E, r == 0xFEFF:
		return true
	case 0x200B <= r && r <= 0x200F, 0x202A <= r && r <= 0x202E, 0x2060 <= r && r <= 0x2069:
		return true
	case 0xE0000 <= r && r <= 0xE007F:
		return true
	}
	return false
}

func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000:
		return true
	}
	return 0x2000 <= r && r <= 0x200A
}

// foldText folds s (see InjectionRules).
func foldText(s string) folded {
	b := make([]byte, 0, len(s))
	off := make([]int32, 0, len(s)+1)
	space := false
	emit := func(c byte, at int) {
		b = append(b, c)
		off = append(off, int32(at))
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f':
				if !space {
					emit(' ', i)
				}
				space = true
			case c == '*' || c == '`':
			case 'A' <= c && c <= 'Z':
				emit(c+'a'-'A', i)
				space = false
			default:
				emit(c, i)
				space = false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case dropped(r):
		case isSpace(r):
			if !space {
				emit(' ', i)
			}
			space = true
		default:
			space = false
			if l, ok := homoglyphs[r]; ok {
				emit(l, i)
			} else if 0xFF01 <= r && r <= 0xFF5E { // fullwidth ASCII
				c := byte(r - 0xFEE0)
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				emit(c, i)
			} else if 0x1D400 <= r && r <= 0x1D6A3 { // mathematical letters
				k := (r - 0x1D400) % 52
				if k >= 26 {
					k -= 26
				}
				emit(byte('a'+k), i)
			} else {
				for j := 0; j < n; j++ {
					emit(s[i+j], i)
				}
			}
		}
		i += n
	}
	off = append(off, int32(len(s)))
	return folded{text: string(b), off: off}
}

// span maps [start, end) of the folded text back to s.
func (f *folded) span(start, end int) (int, int) {
	return int(f.off[start]), int(f.off[end])
}

func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || 'A' <= c && c <= 'Z'
}

// phrases appends the phrase rules' matches in the folded text t, as
// ranges of t.
func phrases(t string, ms []Match) []Match {
	for i := range phraseRules {
		r := &phraseRules[i]
		for _, a := range r.anchors {
			for from := 0; from < len(t); {
				j := strings.Index(t[from:], a)
				if j < 0 {
					break
				}
				at := from + j
				from = at + 1
				if !r.inner && at > 0 && wordByte(t[at-1]) {
					continue
				}
				if r.next != "" {
					n := at + len(a)
					if n >= len(t) || strings.IndexByte(r.next, t[n]) < 0 {
						continue
					}
					if r.second != nil && !startsWithAny(t[n+1:], r.second) {
						continue
					}
				}
				w := t[at:min(len(t), at+phraseWindow)]
				if loc := r.re.FindStringIndex(w); loc != nil && loc[1] > 0 {
					ms = append(ms, Match{Rule: r.id, Start: at, End: at + loc[1]})
					from = at + loc[1]
				}
			}
		}
	}
	return ms
}

func startsWithAny(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// ScanInjection finds prompt-injection markers in s (InjectionRules),
// sorted by position and not overlapping (as Scan), in time linear in s.
func ScanInjection(s string) []Match {
	var ms []Match
	f := foldText(s)
	for _, m := range phrases(f.text, nil) {
		m.Start, m.End = f.span(m.Start, m.End)
		ms = append(ms, m)
	}
	ms = hiddenHTML(&f, ms)
	ms = exfiltrationLinks(&f, ms)
	ms = invisible(s, ms)
	ms = encoded(s, ms)
	return merge(ms)
}

// invisible appends the runs of invisible, bidi-control and tag
// characters of s.
func invisible(s string, ms []Match) []Match {
	add := func(rule string, start, end int) {
		if n := len(ms); n > 0 && ms[n-1].Rule == rule && ms[n-1].End == start {
			ms[n-1].End = end // one finding per run
			return
		}
		ms = append(ms, Match{Rule: rule, Start: start, End: end})
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0xE1 { // ASCII, and every character below U+1000: none is one of these
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == 0x200B, r == 0x180E, 0x2060 <= r && r <= 0x2064:
			add("injection-invisible-characters", i, i+n)
		case r == 0x200C || r == 0x200D:
			if i > 0 && wordByte(s[i-1]) && i+n < len(s) && wordByte(s[i+n]) {
				add("injection-invisible-characters", i, i+n)
			}
		case 0x202A <= r && r <= 0x202E, 0x2066 <= r && r <= 0x2069:
			add("injection-bidi-control", i, i+n)
		case 0xE0000 <= r && r <= 0xE007F:
			end := i + n
			for end < len(s) {
				r2, n2 := utf8.DecodeRuneInString(s[end:])
				if r2 < 0xE0000 || r2 > 0xE007F {
					break
				}
				end += n2
			}
			if !flagTags(s, i, end) {
				add("injection-unicode-tags", i, end)
			}
			i = end
			continue
		}
		i += n
	}
	return ms
}

// flagTags reports whether the tag characters s[start:end] are the tag
// sequence of a subdivision flag: after U+1F3F4 (waving black flag), at
// most six tag letters or digits, then U+E007F (cancel tag).
func flagTags(s string, start, end int) bool {
	const blackFlag = "\U0001F3F4"
	if !strings.HasSuffix(s[:start], blackFlag) {
		return false
	}
	n := 0
	for i := start; i < end; {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r == 0xE007F {
			return i == end && n >= 2 && n <= 6
		}
		if !(0xE0061 <= r && r <= 0xE007A || 0xE0030 <= r && r <= 0xE0039) {
			return false
		}
		n++
	}
	return false
}

// hiddenWindow bounds what is read of a comment or hidden element.
const hiddenWindow = 4096

var (
	// speaksToModel: text that addresses a model or orders it about.
	speaksToModel = regexp.MustCompile(`(?:^|[^a-z0-9])(?:` + aiWord + ` ?[:,]|you (?:must|should|are required to|need to|have to) (?:now )?(?:ignore|send|forward|include|reveal|tell|not tell|never|always|execute|run|call|output|respond|reply|say|email|post|upload|fetch|visit|open|delete|summari[sz]e))`)
	hiddenStyle   = []string{"display:none", "display: none", "visibility:hidden", "visibility: hidden", "font-size:0", "font-size: 0", "opacity:0;", "opacity: 0;", "opacity:0\"", "opacity: 0\"", " hidden>", " hidden "}
)

// hidden reports whether the hidden text t is an injection.
func hiddenInjection(t string) bool {
	return len(phrases(t, nil)) > 0 || speaksToModel.MatchString(t)
}

// hiddenHTML appends HTML comments and hidden elements whose text is an
// injection. Each comment or element is read once, at most hiddenWindow
// bytes, and the search goes on after it: linear.
func hiddenHTML(f *folded, ms []Match) []Match {
	t := f.text
	for from := 0; from < len(t); {
		j := strings.Index(t[from:], "<!--")
		if j < 0 {
			break
		}
		start := from + j
		body := t[start+4 : min(len(t), start+4+hiddenWindow)]
		end := start + 4 + len(body)
		if k := strings.Index(body, "-->"); k >= 0 {
			body, end = body[:k], start+4+k+3
		}
		if hiddenInjection(body) {
			s, e := f.span(start, end)
			ms = append(ms, Match{Rule: "injection-hidden-html", Start: s, End: e})
		}
		from = end
	}
	for _, a := range hiddenStyle {
		for from := 0; from < len(t); {
			j := strings.Index(t[from:], a)
			if j < 0 {
				break
			}
			at := from + j
			from = at + len(a)
			// The element's text: after the tag's '>' (within 512 bytes),
			// up to the next tag.
			gt := strings.IndexByte(t[at:min(len(t), at+512)], '>')
			if gt < 0 {
				continue
			}
			bodyStart := at + gt + 1
			body := t[bodyStart:min(len(t), bodyStart+hiddenWindow)]
			if k := strings.IndexByte(body, '<'); k >= 0 {
				body = body[:k]
			}
			end := bodyStart + len(body)
			if hiddenInjection(body) {
				s, e := f.span(at, end)
				ms = append(ms, Match{Rule: "injection-hidden-html", Start: s, End: e})
			}
			from = max(from, end)
		}
	}
	return ms
}

// dataParams are query parameter names that carry data out.
var dataParams = map[string]bool{
	"data": true, "d": true, "q": true, "secret": true, "secrets": true, "password": true,
	"pass": true, "pwd": true, "exfil": true, "payload": true, "content": true, "info": true, "text": true, "msg": true,
	"conversation": true, "history": true, "chat": true, "context": true, "prompt": true, "memory": true, "summary": true, "body": true,
	"leak": true, "email": true, "ssn": true, "creds": true, "credentials": true,
}

// encodedValue reports whether a query value looks like encoded data:
// 32 or more characters of base64 or hex (a chart's comma-separated
// series, a badge's words or a percent-encoded search are not).
func encodedValue(v string) bool {
	if len(v) < 32 {
		return false
	}
	for i := 0; i < len(v); i++ {
		if !base64Byte(v[i]) && v[i] != '=' {
			return false
		}
	}
	return true
}

// exfiltrationLinks appends images that would send data in their URL's
// query when rendered.
func exfiltrationLinks(f *folded, ms []Match) []Match {
	t := f.text
	add := func(start, end int) {
		s, e := f.span(start, end)
		ms = append(ms, Match{Rule: "injection-exfiltration-link", Start: s, End: e})
	}
	for from := 0; from < len(t); {
		j := strings.Index(t[from:], "![")
		if j < 0 {
			break
		}
		at := from + j
		from = at + 2
		k := strings.Index(t[from:min(len(t), from+1024)], "](")
		if k < 0 {
			continue
		}
		u := from + k + 2
		end := u
		for end < len(t) && end-u < 4096 && t[end] != ')' && t[end] != ' ' {
			end++
		}
		if suspiciousURL(t[u:end]) {
			add(at, min(len(t), end+1))
		}
		from = end
	}
	for from := 0; from < len(t); {
		j := strings.Index(t[from:], "<img")
		if j < 0 {
			break
		}
		at := from + j
		from = at + 4
		k := strings.Index(t[from:min(len(t), from+512)], "src=")
		if k < 0 {
			continue
		}
		u := from + k + 4
		if u < len(t) && (t[u] == '"' || t[u] == '\'') {
			u++
		}
		end := u
		for end < len(t) && end-u < 4096 && t[end] != '"' && t[end] != '\'' && t[end] != ' ' && t[end] != '>' {
			end++
		}
		if suspiciousURL(t[u:end]) {
			add(at, end)
		}
		from = end
	}
	return ms
}

// suspiciousURL reports whether u, an external http(s) URL, has a query
// that looks like it carries data (see InjectionRules).
func suspiciousURL(u string) bool {
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "//") {
		return false
	}
	q := strings.IndexByte(u, '?')
	if q < 0 {
		return false
	}
	query := u[q+1:]
	if strings.ContainsAny(query, "{}$<>[]") || strings.Contains(query, "%7b") || strings.Contains(query, "%24") {
		return true
	}
	for _, p := range strings.FieldsFunc(query, func(r rune) bool { return r == '&' || r == ';' }) {
		name, value, _ := strings.Cut(p, "=")
		if dataParams[name] || encodedValue(value) {
			return true
		}
	}
	return false
}

func base64Byte(c byte) bool {
	return wordByte(c) || c == '+' || c == '/' || c == '-' || c == '_'
}

// minEncoded is the shortest base64 run decoded: 18 bytes of text.
const minEncoded = 24

// encoded appends the base64 runs of s that decode to text holding a
// phrase rule's match. Each run is decoded once: linear.
func encoded(s string, ms []Match) []Match {
	for i := 0; i < len(s); {
		if !base64Byte(s[i]) || (i > 0 && base64Byte(s[i-1])) {
			i++
			continue
		}
		end := i
		for end < len(s) && base64Byte(s[end]) {
			end++
		}
		run := end
		for end < len(s) && end-run < 2 && s[end] == '=' {
			end++
		}
		if run-i >= minEncoded && decodesToInstructions(s[i:run]) {
			ms = append(ms, Match{Rule: "injection-encoded-instructions", Start: i, End: end})
		}
		i = end
		if i == run && i < len(s) { // not advanced past a non-base64 byte
			i++
		}
	}
	return ms
}

// decodesToInstructions decodes run (standard or URL alphabet, padding
// dropped) and reports whether it is mostly printable text in which a
// phrase rule matches.
func decodesToInstructions(run string) bool {
	enc := base64.RawStdEncoding
	if strings.ContainsAny(run, "-_") {
		enc = base64.RawURLEncoding
	}
	if len(run)%4 == 1 { // a length no encoding ends on: drop the odd character
		run = run[:len(run)-1]
	}
	b, err := enc.DecodeString(run)
	if err != nil {
		return false
	}
	printable := 0
	for _, c := range b {
		if c >= 0x20 && c < 0x7F || c == '\n' || c == '\t' || c == '\r' || c >= 0x80 {
			printable++
		}
	}
	if printable*10 < len(b)*9 {
		return false
	}
	return len(phrases(foldText(string(b)).text, nil)) > 0
}
