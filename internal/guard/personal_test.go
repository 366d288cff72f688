package guard

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Test values: the card numbers are the brands' published test numbers,
// the IBAN the ISO 13616 example; none is anyone's.
const (
	visa     = "4111 1111 1111 1111"
	amex     = "378282246310005"
	mc       = "5555-5555-5555-4444"
	mc2      = "2223003122003222"
	testIBAN = "GB82 WEST 1234 5698 7654 32"
	deIBAN   = "DE89370400440532013000"
)

func personalRules(s string) []string {
	var out []string
	for _, m := range ScanPersonal(s) {
		out = append(out, m.Rule+"="+s[m.Start:m.End])
	}
	return out
}

// TestPersonalRules: each rule finds its valid values, exactly (no
// neighbouring byte taken), and none of the near-misses.
func TestPersonalRules(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"email", "mail ada.lovelace+tag@mail.example.co.uk, please", []string{"email=ada.lovelace+tag@mail.example.co.uk"}},
		{"email in angle brackets", "From: Ada <ada@example.org>", []string{"email=ada@example.org"}},
		{"visa spaced", "card " + visa + " exp", []string{"payment-card=" + visa}},
		{"amex", "amex:" + amex + ".", []string{"payment-card=" + amex}},
		{"mastercard dashed", "[" + mc + "]", []string{"payment-card=" + mc}},
		{"mastercard 2-series", mc2, []string{"payment-card=" + mc2}},
		{"card after an order number", "order 1234 " + visa, []string{"payment-card=" + visa}},
		{"iban spaced", "IBAN: " + testIBAN + " (GB)", []string{"iban=" + testIBAN}},
		{"iban compact", "to " + deIBAN + ".", []string{"iban=" + deIBAN}},
		{"iban then capitals", testIBAN + " REF", []string{"iban=" + testIBAN}},
		{"phone", "call +442079460958 now", []string{"phone=+442079460958"}},
		{"phone in json", `{"tel":"+14155552671"}`, []string{"phone=+14155552671"}},
		{"all", "a@b.io " + visa + " " + deIBAN + " +33142685300", []string{"email=a@b.io", "payment-card=" + visa, "iban=" + deIBAN, "phone=+33142685300"}},

		// Near-misses.
		{"order number failing luhn", "order 4111111111111112 shipped", nil},
		{"luhn but no brand", "id 1234567812345670", nil}, // passes Luhn; no brand starts with 1
		{"mixed separators", "4111 1111-1111 1111", nil},
		{"card digits inside a word", "x4111111111111111 4111111111111111y ab4111111111111111cd", nil},
		{"card inside a longer number", "94111111111111111", nil},
		{"iban wrong check", "GB83 WEST 1234 5698 7654 32", nil},
		{"iban unknown country", "ZZ82WEST12345698765432", nil},
		{"iban too short", "GB82 WEST 1234", nil},
		{"iban inside a word", "xGB82WEST12345698765432", nil},
		{"version strings", "v1.2.3 go1.22.4 1.0.0+20130313144700 10.0.19045.3803 2.16.840.1.113730", nil},
		{"timestamps", "2026-12-04T20:12:36+01:00 2026-12-04 20:12:36.123456789 1733342356123 20261204201236", nil},
		{"uuid and hashes", "123e4567-e89b-12d3-a456-426614174000 sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", nil},
		{"phone too short", "+1234567", nil},
		{"phone too long", "+1234567890123456", nil},
		{"phone leading zero", "+0442079460958", nil},
		{"phone in arithmetic", "x+14155552671 3+14155552671", nil},
		{"at without domain", "@user user@ user@host a@b.c", nil},
		{"module version", "golang.org/x/mod@v0.21.0 pkg@latest", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, personalRules(tc.in)); diff != "" {
				t.Errorf("ScanPersonal(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

// TestCheckDigits: Luhn and mod-97 on the standards' examples and
// single-digit changes of them.
func TestCheckDigits(t *testing.T) {
	for _, n := range []string{"4111111111111111", "378282246310005", "6011111111111117", "3530111333300000", "30569309025904", "6200000000000005"} {
		if !cardValid(n) {
			t.Errorf("%s: not a card", n)
		}
		b := []byte(n)
		b[len(b)-1] = '0' + (b[len(b)-1]-'0'+1)%10
		if cardValid(string(b)) {
			t.Errorf("%s: a card with its last digit changed", b)
		}
	}
	for _, v := range []string{"GB82WEST12345698765432", "DE89370400440532013000", "FR1420041010050500013M02606", "NL91ABNA0417164300", "CH9300762011623852957"} {
		if !ibanValid(v) {
			t.Errorf("%s: not an IBAN", v)
		}
		if ibanValid(v[:len(v)-1] + string('0'+(v[len(v)-1]-'0'+1)%10)) {
			t.Errorf("%s: valid with its last digit changed", v)
		}
	}
	if ibanValid("GB8") || ibanValid("GB82WEST1234569876543!") {
		t.Error("malformed IBAN accepted")
	}
}

// TestPersonalHostileInputs: invalid UTF-8 is scanned as bytes; many
// matches are all found; 1 MiB built against each rule (almost-matches
// repeated) is scanned in linear time.
func TestPersonalHostileInputs(t *testing.T) {
	bad := "\xff\xfe" + "ada@example.org" + "\xc3\x28 " + visa + "\x80"
	if diff := cmp.Diff([]string{"email=ada@example.org", "payment-card=" + visa}, personalRules(bad)); diff != "" {
		t.Errorf("invalid UTF-8 (-want +got):\n%s", diff)
	}
	many := strings.Repeat("ada@example.org "+visa+" "+testIBAN+" +442079460958\n", 5000)
	ms := ScanPersonal(many)
	if len(ms) != 20000 {
		t.Errorf("%d matches in 5000 lines of 4, want 20000", len(ms))
	}
	red := RedactText(many, ms)
	for _, v := range []string{"ada@", "4111", "GB82", "+44"} {
		if strings.Contains(red, v) {
			t.Fatalf("redacted text still holds %q", v)
		}
	}
	for _, unit := range []string{
		"a@", "a.", "@a.", "a@a.", "a@a-", "1 ", "1-", "4111 1111 1111 111", "4111111111111112 ", "GB82 ", "GB82 WEST ", "GB82WEST1234569876543X ", "+1", "+123456789012345", ".+14155552671", "+",
	} {
		s := strings.Repeat(unit, (1<<20)/len(unit))
		start := time.Now()
		n := len(ScanPersonal(s))
		took := time.Since(start)
		t.Logf("%q ×%d: %d matches in %v", unit, len(s)/len(unit), n, took)
		if took > 10*time.Second {
			t.Errorf("%q ×%d took %v: not linear", unit, len(s)/len(unit), took)
		}
	}
}

// TestInspectPersonalData: each category has its own action: personal
// data redacted while secrets are off, a block of personal data names
// its findings and the setting, and secrets and personal data together.
func TestInspectPersonalData(t *testing.T) {
	text := func() *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "to ada@example.org card " + visa + " key " + ghp}}}
	}
	res, fs := InspectPolicy(text(), Policy{PersonalData: Redact}, "fs_read")
	if got := res.Content[0].(*mcp.TextContent).Text; got != "to [REDACTED:email] card [REDACTED:payment-card] key "+ghp {
		t.Errorf("redacted: %q", got)
	}
	want := []Finding{{Rule: "email", Path: "content[0].text", Action: "redact"}, {Rule: "payment-card", Path: "content[0].text", Action: "redact"}}
	if diff := cmp.Diff(want, fs); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}

	res, fs = InspectPolicy(text(), Policy{Secrets: Redact, PersonalData: Block}, "fs_read")
	got := res.Content[0].(*mcp.TextContent).Text
	if !res.IsError || !strings.Contains(got, "holds personal data (email at content[0].text, payment-card at content[0].text)") ||
		!strings.Contains(got, "guard.results.personal_data") || strings.Contains(got, "github-token") || strings.Contains(got, "ada@") {
		t.Errorf("blocked: %v %q", res.IsError, got)
	}
	want = []Finding{{Rule: "github-token", Path: "content[0].text", Action: "redact"}, {Rule: "email", Path: "content[0].text", Action: "block"}, {Rule: "payment-card", Path: "content[0].text", Action: "block"}}
	if diff := cmp.Diff(want, fs); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}

	res, fs = InspectPolicy(text(), Policy{Secrets: Redact, PersonalData: Redact}, "fs_read")
	if got := res.Content[0].(*mcp.TextContent).Text; got != "to [REDACTED:email] card [REDACTED:payment-card] key [REDACTED:github-token]" || len(fs) != 3 {
		t.Errorf("both redacted: %q %v", got, fs)
	}
	res, fs = InspectPolicy(text(), Policy{Secrets: Redact, PersonalData: Off}, "fs_read")
	if got := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(got, "ada@example.org") || len(fs) != 1 {
		t.Errorf("personal data off: %q %v", got, fs)
	}
}

// BenchmarkInspectPersonalData: secrets and personal data both on, over
// record-like text full of digits (what the digit rules scan most).
func BenchmarkInspectPersonalData(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1KB", 1 << 10}, {"1MiB", 1 << 20}} {
		line := "order 1234567 on 2026-12-04T20:12:36+01:00 by customer 998877, total 19.99 EUR, v1.2.3\n"
		text := strings.Repeat(line, size.n/len(line)+1)[:size.n-16] + " ada@example.org"
		b.Run(size.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}
				if _, fs := InspectPolicy(res, Policy{Secrets: Redact, PersonalData: Redact}, "x"); len(fs) != 1 {
					b.Fatal(fs)
				}
			}
		})
	}
}
