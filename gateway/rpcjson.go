package gateway

// The JSON grammar under the body check (rpcbody.go): one pass over the
// bytes, as encoding/json's scanner reads them, keeping the member names
// of open objects so that a repeated member is found where it is.

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit: json.Valid refuses a body
// nested deeper, so the scanner does too.
const maxDepth = 10000

// scanner reads a body once, byte by byte, following the JSON grammar as
// encoding/json's scanner does (the same whitespace, numbers, escapes and
// depth limit; invalid UTF-8 inside strings is allowed, as json.Valid
// allows it). Before it, each nesting level was re-read by encoding/json
// (json.Valid, Decoder.Token, jsoncanon.CheckDuplicates): ~150 allocations
// for a 1 KB call on every request.
type scanner struct {
	b     []byte
	i     int
	depth int
	at    string // the message being read: "$" or "$[i]"
	// path is where the value being read sits below at, kept so that a
	// refusal can name it; it is turned into text only on refusal.
	path []step
	// keys holds the member names of every open object (decoded), each
	// object's from its own start, so a repeat is found without a map per
	// object (one is made only for an object with many members).
	keys [][]byte

	keysBuf [32][]byte
	pathBuf [8]step
}

// step is one level of a path: a member name or an array index. plain
// marks an envelope member, param a member of params (see refusal).
type step struct {
	key   []byte
	index int
	isKey bool
	plain bool
	param bool
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value reads one JSON value. With found set, an object in it that
// repeats a member is noted there (the first one only) and reading goes
// on; the error returned is errSyntax only.
func (s *scanner) value(found **repeat) error {
	s.ws()
	if s.i >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(found)
	case c == '[':
		s.i++
		if err := s.enter(); err != nil {
			return err
		}
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			s.depth--
			return nil
		}
		s.path = append(s.path, step{})
		for n := 0; ; n++ {
			s.path[len(s.path)-1] = step{index: n}
			if err := s.value(found); err != nil {
				return err
			}
			if done, err := s.next(']'); err != nil {
				return err
			} else if done {
				break
			}
		}
		s.path = s.path[:len(s.path)-1]
		s.depth--
		return nil
	case c == '"':
		_, _, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return errSyntax
}

// object reads an object below the message level.
func (s *scanner) object(found **repeat) error {
	s.i++ // the '{'
	if err := s.enter(); err != nil {
		return err
	}
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	keyStart := len(s.keys)
	defer func() { s.keys = s.keys[:keyStart] }()
	var seen map[string]struct{}
	s.path = append(s.path, step{})
	for {
		key, err := s.key()
		if err != nil {
			return err
		}
		// Once a repeat is found (or when none is looked for) only the
		// syntax is left to check.
		if found != nil && *found == nil {
			if s.add(keyStart, &seen, key) {
				s.path = s.path[:len(s.path)-1] // the path of the object, not of its member
				*found = s.repeatHere(key)
				s.path = append(s.path, step{})
			}
		}
		s.path[len(s.path)-1] = step{key: key, isKey: true}
		if err := s.value(found); err != nil {
			return err
		}
		if done, err := s.next('}'); err != nil {
			return err
		} else if done {
			break
		}
	}
	s.path = s.path[:len(s.path)-1]
	s.depth--
	return nil
}

// manyMembers is the size from which an object's members are kept in a map.
const manyMembers = 16

// enter counts one more open object or array.
func (s *scanner) enter() error {
	s.depth++
	if s.depth > maxDepth {
		return errSyntax
	}
	return nil
}

// next reads the ',' between elements or the closing delimiter; done
// reports the end of the object or array.
func (s *scanner) next(end byte) (done bool, err error) {
	s.ws()
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case ',':
			s.i++
			return false, nil
		case end:
			s.i++
			return true, nil
		}
	}
	return false, errSyntax
}

// key reads a member name and the ':' after it and returns the name as a
// decoder compares it (unescaped).
func (s *scanner) key() ([]byte, error) {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, errSyntax
	}
	raw, plain, err := s.str()
	if err != nil {
		return nil, err
	}
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, errSyntax
	}
	s.i++
	if plain {
		return raw[1 : len(raw)-1], nil
	}
	var k string
	_ = json.Unmarshal(raw, &k) // valid: str checked it
	return []byte(k), nil
}

// str reads a string, returning it quoted as written; plain reports that
// its bytes are what it decodes to (no escape, valid UTF-8), so it needs
// no decoding.
func (s *scanner) str() (raw []byte, plain bool, err error) {
	start := s.i
	s.i++ // the '"'
	plain = true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			raw = s.b[start:s.i]
			if plain && !utf8.Valid(raw) {
				plain = false // decoding replaces invalid UTF-8 by U+FFFD
			}
			return raw, plain, nil
		case c < 0x20:
			return nil, false, errSyntax
		case c == '\\':
			plain = false
			s.i++
			if s.i >= len(s.b) {
				return nil, false, errSyntax
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for j := 0; j < 4; j++ {
					if s.i >= len(s.b) || !isHex(s.b[s.i]) {
						return nil, false, errSyntax
					}
					s.i++
				}
			default:
				return nil, false, errSyntax
			}
		default:
			s.i++
		}
	}
	return nil, false, errSyntax
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i >= len(s.b) {
		return errSyntax
	}
	switch c := s.b[s.i]; {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		s.digits()
	default:
		return errSyntax
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return errSyntax
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return errSyntax
		}
	}
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) literal(word string) error {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return errSyntax
	}
	s.i += len(word)
	return nil
}

// add notes key as a member of the innermost object, whose members read
// so far are keys[from:], and reports whether it was one already. The
// few members of an object are compared one by one (no allocation); an
// object with many gets a map (*seen), so that a large one costs linear
// time, not quadratic.
func (s *scanner) add(from int, seen *map[string]struct{}, key []byte) bool {
	if *seen == nil && len(s.keys)-from < manyMembers {
		for _, k := range s.keys[from:] {
			if bytes.Equal(k, key) {
				return true
			}
		}
		s.keys = append(s.keys, key)
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*manyMembers)
		for _, k := range s.keys[from:] {
			(*seen)[string(k)] = struct{}{}
		}
	}
	if _, ok := (*seen)[string(key)]; ok {
		return true
	}
	(*seen)[string(key)] = struct{}{}
	return false
}
