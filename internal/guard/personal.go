package guard

import (
	"regexp"
	"strings"
)

// PersonalRules are the personal-data rules (guard.results.personal_data),
// a category of their own beside the secret Rules: ordinary data (an
// order number, a contact address in a README) matches them far more
// often than it matches a token format, so they have their own setting
// and are off unless configured. Each is written after the format's
// standard and, where it has one, checked by its check digits (Valid);
// each is an RE2 expression (linear) behind a literal Hint or its Anchors:
//
//   - email: an address as RFC 5321 writes its common form: a local part
//     of letters, digits and ._%+- , "@", then a domain of dot-separated
//     labels (letters, digits, inner hyphens) ending in a top-level label
//     of two or more letters. Not preceded by a letter or digit.
//   - payment-card: 13 to 19 digits, single spaces or dashes allowed
//     between them, not inside a word or a longer number, whose Luhn
//     check (ISO/IEC 7812) passes and whose prefix and length are a
//     brand's (Visa 4; Mastercard 51–55, 2221–2720; American Express
//     34, 37; Discover 6011, 644–649, 65; Diners Club 300–305, 36, 38,
//     39; JCB 3528–3589; UnionPay 62). A 16-digit order number fails
//     Luhn nine times in ten and a brand's prefix most of the rest.
//   - iban: an International Bank Account Number (ISO 13616): a country
//     code, two check digits and the country's number of letters and
//     digits (groups of four separated by single spaces allowed), only
//     for a country whose length is known (ibanLengths) and only when the
//     mod-97 check gives 1.
//   - phone: a number in E.164 form only: "+", a digit 1–9, then 7 to 14
//     more digits (8 to 15 in all), not preceded by a letter, digit or
//     dot and not followed by a digit (so "1.0+20130313144700", a semver
//     build, and "+01:00", an offset, are not numbers). Numbers written
//     nationally ("(555) 123-4567") are not found: without the country
//     code a run of digits is anything.
var PersonalRules = []Rule{
	{ID: "email", Next: nextEmail, Re: regexp.MustCompile(
		`^[A-Za-z0-9._%+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}\b`)},
	{ID: "payment-card", Next: nextCard, Valid: cardValid, Re: regexp.MustCompile(
		`^[0-9](?:[ -]?[0-9]){12,18}\b`)},
	{ID: "iban", Next: nextIBAN, Trim: ibanTrim, Re: regexp.MustCompile(
		`^[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b`)},
	{ID: "phone", Next: nextPhone, Re: regexp.MustCompile(
		`^\+[1-9][0-9]{7,14}\b`)},
}

// The Next functions find where a rule's candidates start with a byte
// loop or strings.IndexByte (much cheaper than an unanchored scan of the
// expression, which RE2 runs as an automaton over every byte), never
// inside a word (RE2 has no look-behind). Each returns the candidate's
// start, or -1, and where to look next if the candidate fails.

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isUpper(c byte) bool { return 'A' <= c && c <= 'Z' }

// emailLocal is a byte of an address's local part.
func emailLocal(c byte) bool {
	return continues(c, "._%+-")
}

// nextEmail: at each "@", back over the local part (at most 64 bytes,
// RFC 5321's limit, and never before from).
func nextEmail(s string, from int) (int, int) {
	for from < len(s) {
		j := strings.IndexByte(s[from:], '@')
		if j < 0 {
			return -1, len(s)
		}
		at := from + j
		start := at
		for start > from && at-start < 64 && emailLocal(s[start-1]) {
			start--
		}
		if start < at && (start == 0 || !continues(s[start-1], "")) {
			return start, at + 1
		}
		from = at + 1
	}
	return -1, len(s)
}

// nextCard: the start of a run of digits (single spaces or dashes
// between them) holding at least 13 digits, not after a letter or digit.
func nextCard(s string, from int) (int, int) {
	for i := from; i < len(s); i++ {
		if !isDigit(s[i]) || (i > 0 && continues(s[i-1], "")) {
			continue
		}
		n, j := 0, i
		for j < len(s) && n < 13 { // 13 digits are enough: bounded per start
			if isDigit(s[j]) {
				n++
				j++
			} else if (s[j] == ' ' || s[j] == '-') && j+1 < len(s) && isDigit(s[j+1]) {
				j++
			} else {
				break
			}
		}
		if n >= 13 {
			return i, i + 1
		}
		i = j // the run is too short: past it
	}
	return -1, len(s)
}

// nextIBAN: two capitals and two digits, not after a letter or digit.
func nextIBAN(s string, from int) (int, int) {
	for i := from; i+4 <= len(s); i++ {
		j := strings.IndexAny(s[i:], "0123456789")
		if j < 0 {
			break
		}
		i += j
		if i >= 2 && i+1 < len(s) && isDigit(s[i+1]) && isUpper(s[i-1]) && isUpper(s[i-2]) && (i == 2 || !continues(s[i-3], "")) {
			return i - 2, i + 1
		}
	}
	return -1, len(s)
}

// nextPhone: a "+" not after a letter, digit, dot or "+" (an arithmetic
// expression, a version's build suffix).
func nextPhone(s string, from int) (int, int) {
	for from < len(s) {
		j := strings.IndexByte(s[from:], '+')
		if j < 0 {
			return -1, len(s)
		}
		at := from + j
		if at == 0 || !continues(s[at-1], ".+") {
			return at, at + 1
		}
		from = at + 1
	}
	return -1, len(s)
}

// check applies the rule's Trim and Valid to the candidate s[start:end].
func (r *Rule) check(s string, start, end int) (Match, bool) {
	if r.Trim != nil {
		var ok bool
		if end, ok = r.Trim(s, start, end); !ok {
			return Match{}, false
		}
	}
	if r.Valid != nil && !r.Valid(s[start:end]) {
		return Match{}, false
	}
	return Match{Rule: r.ID, Start: start, End: end}, true
}

// ScanPersonal finds personal data in s, as Scan finds secrets: at each
// candidate start (the rule's Next), Re, anchored, runs until the text
// stops matching (at most 64+255 bytes for an address, 37 for a card, 42
// for an IBAN, 16 for a phone), then the check digits. A failed
// candidate gives way to the next (so "order 1234 4111 1111 1111 1111"
// still finds the card after the order number): linear in the text.
func ScanPersonal(s string) []Match {
	var ms []Match
	for i := range PersonalRules {
		r := &PersonalRules[i]
		for from := 0; from < len(s); {
			start, resume := r.Next(s, from)
			if start < 0 {
				break
			}
			if loc := r.Re.FindStringIndex(s[start:]); loc != nil {
				if m, ok := r.check(s, start, start+loc[1]); ok {
					ms = append(ms, m)
					from = m.End
					continue
				}
			}
			from = resume
		}
	}
	return merge(ms)
}

// digitsOf returns the digits of v (separators dropped).
func digitsOf(v string) []byte {
	d := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if '0' <= v[i] && v[i] <= '9' {
			d = append(d, v[i]-'0')
		}
	}
	return d
}

// luhn reports whether the digits pass the Luhn check.
func luhn(d []byte) bool {
	sum := 0
	for i := len(d) - 1; i >= 0; i-- {
		x := int(d[i])
		if (len(d)-1-i)%2 == 1 {
			x *= 2
			if x > 9 {
				x -= 9
			}
		}
		sum += x
	}
	return sum%10 == 0
}

// prefix is the number the first n digits make.
func prefix(d []byte, n int) int {
	p := 0
	for i := 0; i < n && i < len(d); i++ {
		p = p*10 + int(d[i])
	}
	return p
}

// cardBrand reports whether the digits' prefix and length are a card
// brand's (see PersonalRules).
func cardBrand(d []byte) bool {
	n := len(d)
	p1, p2, p3, p4 := prefix(d, 1), prefix(d, 2), prefix(d, 3), prefix(d, 4)
	switch {
	case p1 == 4:
		return n == 13 || n == 16 || n == 19 // Visa
	case 51 <= p2 && p2 <= 55, 2221 <= p4 && p4 <= 2720:
		return n == 16 // Mastercard
	case p2 == 34 || p2 == 37:
		return n == 15 // American Express
	case p4 == 6011, p2 == 65, 644 <= p3 && p3 <= 649:
		return 16 <= n && n <= 19 // Discover
	case 300 <= p3 && p3 <= 305, p2 == 36, p2 == 38, p2 == 39:
		return 14 <= n && n <= 19 // Diners Club
	case 3528 <= p4 && p4 <= 3589:
		return 16 <= n && n <= 19 // JCB
	case p2 == 62:
		return 16 <= n && n <= 19 // UnionPay
	}
	return false
}

// cardValid: a brand's prefix and length, and the Luhn check; the
// separators, if any, used consistently (all spaces or all dashes).
func cardValid(v string) bool {
	if strings.Contains(v, " ") && strings.Contains(v, "-") {
		return false
	}
	d := digitsOf(v)
	return cardBrand(d) && luhn(d)
}

// ibanLengths are the IBAN lengths of the countries of the SWIFT IBAN
// registry most often met (a country not here is not matched).
var ibanLengths = map[string]int{
	"AD": 24, "AE": 23, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
	"CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
	"ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27,
	"GT": 28, "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30,
	"KZ": 20, "LB": 28, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22,
	"MK": 19, "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29,
	"PT": 25, "QA": 29, "RO": 24, "RS": 22, "SA": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
	"TN": 24, "TR": 26, "UA": 29, "VG": 24, "XK": 20,
}

// ibanTrim cuts a candidate IBAN s[start:end] to its country's length
// (the expression may have taken a following group of capitals) and
// checks it: ok when the country is known, the candidate long enough and
// the mod-97 check gives 1.
func ibanTrim(s string, start, end int) (int, bool) {
	want, ok := ibanLengths[s[start:start+2]]
	if !ok {
		return 0, false
	}
	var b []byte
	i := start
	for ; i < end && len(b) < want; i++ {
		if s[i] != ' ' {
			b = append(b, s[i])
		}
	}
	if len(b) < want || (i < len(s) && continues(s[i], "")) {
		return 0, false // too short, or cut inside a group
	}
	return i, ibanValid(string(b))
}

// ibanValid is the ISO 13616 check: the first four characters moved to
// the end, letters as 10–35, the number mod 97 is 1.
func ibanValid(v string) bool {
	if len(v) < 5 {
		return false
	}
	r := v[4:] + v[:4]
	m := 0
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case '0' <= c && c <= '9':
			m = (m*10 + int(c-'0')) % 97
		case 'A' <= c && c <= 'Z':
			m = (m*100 + int(c-'A') + 10) % 97
		default:
			return false
		}
	}
	return m == 1
}
