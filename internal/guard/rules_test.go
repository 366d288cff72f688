package guard

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// chars returns n characters of alphabet, deterministic but irregular, so
// that test tokens look like real ones without being any.
func chars(alphabet string, n int, seed int) string {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = alphabet[int(x%uint32(len(alphabet)))]
	}
	return string(b)
}

const (
	upper  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	base32 = upper + "234567"
	alnum  = upper + "abcdefghijklmnopqrstuvwxyz0123456789"
	b64    = alnum + "/+"
	urlb64 = alnum + "_-"
)

// Test secrets, assembled at run time (never committed as literals).
var (
	awsKey    = "AKIA" + chars(base32, 16, 1)
	awsTemp   = "ASIA" + chars(base32, 16, 2)
	awsSecret = chars(b64, 40, 3)
	ghp       = "ghp_" + chars(alnum, 36, 4)
	gho       = "gho_" + chars(alnum, 36, 5)
	ghPAT     = "github_pat_" + chars(alnum, 22, 6) + "_" + chars(alnum, 59, 7)
	slackBot  = "xoxb-" + chars("0123456789", 12, 8) + "-" + chars("0123456789", 13, 9) + "-" + chars(alnum, 24, 10)
	slackUser = "xoxp-" + chars("0123456789", 11, 11) + "-" + chars("0123456789", 11, 12) + "-" + chars("0123456789", 12, 13) + "-" + chars("abcdef0123456789", 32, 14)
	googleKey = "AIza" + chars(urlb64, 35, 15)
	jwt       = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0." + chars(urlb64, 43, 16)
	stripe    = "sk_live_" + chars(alnum, 24, 17)
	stripeRK  = "rk_live_" + chars(alnum, 99, 18)
)

func rsaPEM(t testing.TB) string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

func ecPKCS8PEM(t testing.TB) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func rules(ms []Match) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Rule)
	}
	return out
}

// TestRules: each rule finds its secret in context, and exactly the
// secret's bytes are replaced.
func TestRules(t *testing.T) {
	rsaKey, ecKey := strings.TrimSpace(rsaPEM(t)), strings.TrimSpace(ecPKCS8PEM(t))
	encrypted := "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F2A9C1B7E6D5A4B3F2A9C1B7E6D5A4B\n\n" + chars(b64, 64, 20) + "\n" + chars(b64, 20, 21) + "==\n-----END RSA PRIVATE KEY-----"
	openssh := "-----BEGIN OPENSSH PRIVATE KEY-----\n" + chars(b64, 70, 22) + "\n" + chars(b64, 70, 23) + "\n-----END OPENSSH PRIVATE KEY-----"
	pgp := "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n" + chars(b64, 64, 24) + "\n=" + chars(b64, 4, 25) + "\n-----END PGP PRIVATE KEY BLOCK-----"
	for _, tc := range []struct {
		name, rule, secret, before, after string
	}{
		{"rsa pem", "private-key", rsaKey, "key file:\n", "\nthat was it"},
		{"pkcs8 pem", "private-key", ecKey, "", ""},
		{"encrypted pem", "private-key", encrypted, "x ", " y"},
		{"openssh", "private-key", openssh, "", "\n"},
		{"pgp", "private-key", pgp, "", ""},
		{"pem in a JSON string", "private-key", strings.ReplaceAll(rsaKey, "\n", `\n`), `{"key":"`, `"}`},
		{"aws access key", "aws-access-key", awsKey, "aws_access_key_id = ", "\n"},
		{"aws temporary key", "aws-access-key", awsTemp, `"AccessKeyId": "`, `",`},
		{"aws secret in credentials", "aws-secret-key", awsSecret, "aws_secret_access_key = ", "\n"},
		{"aws secret in JSON", "aws-secret-key", awsSecret, `{"SecretAccessKey": "`, `"}`},
		{"aws secret in env", "aws-secret-key", awsSecret, "AWS_SECRET_ACCESS_KEY=", ""},
		{"github classic", "github-token", ghp, "token: ", ""},
		{"github oauth", "github-token", gho, "Authorization: token ", "\r\n"},
		{"github fine-grained", "github-token", ghPAT, "GITHUB_TOKEN=", " "},
		{"slack bot", "slack-token", slackBot, "SLACK_BOT_TOKEN=", "\n"},
		{"slack user", "slack-token", slackUser, `"token":"`, `"`},
		{"google api key", "google-api-key", googleKey, "https://maps.googleapis.com/x?key=", "&q=1"},
		{"jwt", "jwt", jwt, "Authorization: Bearer ", ""},
		{"unsigned jwt", "jwt", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9.", "t=", " "},
		{"stripe live", "stripe-key", stripe, "STRIPE_KEY=", ""},
		{"stripe restricted", "stripe-key", stripeRK, "'", "'"},
		// Longer than the window an anchored rule starts with (MaxLen): it grows.
		{"long jwt", "jwt", "eyJhbGciOiJSUzI1NiJ9.eyJ" + chars(urlb64, 9000, 26) + "." + chars(urlb64, 342, 27), "", ""},
		{"long stripe key", "stripe-key", "sk_live_" + chars(alnum, 600, 28), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.before + tc.secret + tc.after
			ms := Scan(s)
			if diff := cmp.Diff([]string{tc.rule}, rules(ms)); diff != "" {
				t.Fatalf("rules (-want +got):\n%s", diff)
			}
			if got := s[ms[0].Start:ms[0].End]; got != tc.secret {
				t.Fatalf("matched %q, want the secret %q", got, tc.secret)
			}
			want := tc.before + Marker(tc.rule) + tc.after
			if got := RedactText(s, ms); got != want {
				t.Fatalf("redacted %q, want %q", got, want)
			}
		})
	}
}

// TestNearMisses: text that looks like a secret but is not one (the
// false positives that would make the guard useless on source and prose).
func TestNearMisses(t *testing.T) {
	for _, s := range []string{
		"AKIAIOSFODNN7EXAMPLE", // AWS's documented example
		"aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", // ditto
		"AKIA" + chars(base32, 15, 1),                                      // one character short
		"AKIA" + chars(base32, 17, 1),                                      // one too many: a longer word
		"XAKIA" + chars(base32, 16, 1),                                     // inside a word
		"AKIA" + strings.ToLower(chars(upper, 16, 1)),                      // lowercase
		"commit " + chars("0123456789abcdef", 40, 3),                       // a SHA-1 is 40 characters too
		chars(b64, 40, 3),                                                  // 40 base64 characters without a name
		"secret_key = os.Getenv(\"SECRET_KEY\")",
		"ghp_" + chars(alnum, 35, 4), // short
		"ghp_" + chars(alnum, 37, 4), // long
		"ghx_" + chars(alnum, 36, 4), // no such prefix
		"the ghp_ prefix marks a personal access token",
		"github_pat_" + chars(alnum, 40, 6),
		"xoxb-your-bot-token", "xoxb-123-abc", "xoxq-123456789-abcdefghijk",
		"AIza" + chars(urlb64, 34, 15), "AIzaSy in the docs",
		"eyJhbGciOiJIUzI1NiJ9", // a header alone
		"eyJ.eyJ.sig",
		"sk_test_" + chars(alnum, 24, 17), // test keys are not live credentials
		"sk_live_" + chars(alnum, 23, 17), // short
		"sk_live_abc",
		"-----BEGIN PUBLIC KEY-----\n" + chars(b64, 64, 30) + "\n-----END PUBLIC KEY-----",
		"-----BEGIN CERTIFICATE-----\n" + chars(b64, 64, 31) + "\n-----END CERTIFICATE-----",
		"// PRIVATE KEY blocks start with -----BEGIN and a label",
		"a key file starts with -----BEGIN RSA PRIVATE KEY----- and ends with its END line", // a header alone
		"-----BEGIN RSA PRIVATE KEY-----\n\nsee the file for the rest",                      // no body
		"func Scan(s string) []Match { return nil } // private key detection",
	} {
		if ms := Scan(s); len(ms) != 0 {
			t.Errorf("Scan(%q) = %v, want nothing", s, ms)
		}
	}
}

// TestManySecrets: every secret of a text is found, adjacent ones too.
func TestManySecrets(t *testing.T) {
	var b strings.Builder
	var want []string
	for i := range 500 {
		k := "AKIA" + chars(base32, 16, 100+i)
		switch i % 3 {
		case 0:
			b.WriteString(k + ",") // adjacent, one separator
		case 1:
			b.WriteString("token " + "ghp_" + chars(alnum, 36, 1000+i) + "\n")
			want = append(want, "github-token")
			continue
		default:
			b.WriteString(" " + k + " ")
		}
		want = append(want, "aws-access-key")
	}
	s := b.String()
	ms := Scan(s)
	if len(ms) != len(want) {
		t.Fatalf("found %d secrets, want %d", len(ms), len(want))
	}
	// Sorted by position, so in the order written.
	if diff := cmp.Diff(want, rules(ms)); diff != "" {
		t.Fatalf("rules (-want +got):\n%s", diff)
	}
	red := RedactText(s, ms)
	if strings.Contains(red, "AKIA") || strings.Contains(red, "ghp_") {
		t.Fatal("a secret survived redaction")
	}
}

// TestOverlapping: where rules overlap (an AWS secret key whose context
// also holds an access key, a JWT inside a PEM-like block) the union of
// the matched bytes is redacted, once.
func TestOverlapping(t *testing.T) {
	// The access key sits inside the 40 characters the secret-key rule takes.
	inner := "AKIA" + chars(base32, 16, 40)
	secret := chars(b64, 10, 41) + "/" + inner + chars(b64, 9, 42)
	s := "secret_key: " + secret + "\n"
	ms := Scan(s)
	if len(ms) != 1 {
		t.Fatalf("Scan = %v, want one merged match", ms)
	}
	if got := RedactText(s, ms); got != "secret_key: [REDACTED:aws-secret-key]\n" {
		t.Fatalf("redacted %q", got)
	}
	if m := merge([]Match{{"a", 0, 10}, {"b", 5, 20}, {"c", 20, 25}, {"d", 21, 22}}); !cmp.Equal(m, []Match{{"a", 0, 20}, {"c", 20, 25}}) {
		t.Fatalf("merge = %v", m)
	}
}

// TestTruncatedPEM: a key cut off before its END line is still redacted,
// to the end of its body.
func TestTruncatedPEM(t *testing.T) {
	k := rsaPEM(t)
	cut := k[:len(k)/2]
	s := cut + "\n\nnext paragraph of prose"
	ms := Scan(s)
	if len(ms) != 1 || ms[0].Rule != "private-key" {
		t.Fatalf("Scan = %v", ms)
	}
	got := RedactText(s, ms)
	if got != "[REDACTED:private-key]\n\nnext paragraph of prose" {
		t.Fatalf("redacted %q", got)
	}
}

// TestInvalidUTF8: bytes that are not UTF-8 around and inside a token do
// not hide it nor make a false one; the bytes outside are kept as they are.
func TestInvalidUTF8(t *testing.T) {
	s := "\xff\xfe" + awsKey + "\xc3\x28 and \xe2\x82 " + ghp[:10] + "\xff" + ghp[10:]
	ms := Scan(s)
	if diff := cmp.Diff([]string{"aws-access-key"}, rules(ms)); diff != "" {
		t.Fatalf("rules (-want +got):\n%s", diff)
	}
	if got, want := RedactText(s, ms), "\xff\xfe[REDACTED:aws-access-key]\xc3\x28 and \xe2\x82 "+ghp[:10]+"\xff"+ghp[10:]; got != want {
		t.Fatalf("redacted %q, want %q", got, want)
	}
}

// TestHugeInput: 1 MiB of text with secrets at the start, middle and end
// is scanned (RE2: linear time) and every one found.
func TestHugeInput(t *testing.T) {
	filler := strings.Repeat("lorem ipsum dolor sit amet, secret_key = os.Getenv(x) eyJ AKIA ghp_ -----BEGIN\n", (1<<20)/80)
	s := awsKey + "\n" + filler[:len(filler)/2] + rsaPEM(t) + filler[len(filler)/2:] + stripe
	ms := Scan(s)
	if diff := cmp.Diff([]string{"aws-access-key", "private-key", "stripe-key"}, rules(ms)); diff != "" {
		t.Fatalf("rules (-want +got):\n%s", diff)
	}
	// A long run of token characters (the worst case for the boundaries).
	if ms := Scan(strings.Repeat("A", 1<<20)); len(ms) != 0 {
		t.Fatalf("Scan(AAAA…) = %v", ms)
	}
}
