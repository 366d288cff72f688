package timeline

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/jsoncanon"
)

// TestSEP3004KnownAnswer: the draft's two-extension known-answer record
// canonicalizes to the draft's preimage and hashes to its digest, so the
// canonical form here is the draft's.
func TestSEP3004KnownAnswer(t *testing.T) {
	body := map[string]any{
		"event_id":    "99999999-9999-9999-9999-999999999999",
		"event_type":  "tool_call",
		"occurred_at": "2026-06-06T12:00:00.000Z",
		"outcome":     "deferred",
		"extensions": map[string]any{
			"caller-governance": map[string]any{"flagged": false, "invoked_by_principal_id": nil,
				"purpose_declared": "reconcile June invoices", "session_id": "55555555-5555-5555-5555-555555555555"},
			"runtime-security": map[string]any{"drift_status": "confirmed",
				"evidence_hash":       "sha256:b2c547e2c8f17eafc72ef5c2d4d7b6b4d0f7437ab52bae573a9af14ff5e2d9be",
				"policy_id":           "example.org/runtime-drift@3",
				"quarantine_decision": "quarantine", "severity": "high"},
		},
		"previous_hash": nil,
		"principal_id":  "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa",
		"tool_name":     "export",
	}
	const preimage = `{"event_id":"99999999-9999-9999-9999-999999999999","event_type":"tool_call","extensions":{"caller-governance":{"flagged":false,"invoked_by_principal_id":null,"purpose_declared":"reconcile June invoices","session_id":"55555555-5555-5555-5555-555555555555"},"runtime-security":{"drift_status":"confirmed","evidence_hash":"sha256:b2c547e2c8f17eafc72ef5c2d4d7b6b4d0f7437ab52bae573a9af14ff5e2d9be","policy_id":"example.org/runtime-drift@3","quarantine_decision":"quarantine","severity":"high"}},"occurred_at":"2026-06-06T12:00:00.000Z","outcome":"deferred","previous_hash":null,"principal_id":"aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa","tool_name":"export"}`
	got, err := jsoncanon.JCS(body)
	if err != nil || string(got) != preimage {
		t.Fatalf("canonical form %s (%v)\nwant %s", got, err, preimage)
	}
	sum := sha256.Sum256(got)
	if h := hex.EncodeToString(sum[:]); h != "f733fed9cc757165f810b778e4baba1f51a45504988e937707aaab4361b2f064" {
		t.Errorf("hash %s, want the draft's f733fed9…", h)
	}
}

func exportSEP(t *testing.T, key ed25519.PrivateKey) []byte {
	t.Helper()
	var b bytes.Buffer
	x := NewSEP3004Exporter(&b, key)
	for _, tc := range tasks {
		if err := x.Write(build(t, tc.runs, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Seal(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func join(ls [][]byte) []byte { return append(bytes.Join(ls, []byte("\n")), '\n') }

func TestSEP3004ExportVerifies(t *testing.T) {
	pub, priv := newKey(t)
	out := exportSEP(t, priv)
	ls := lines(out)
	res, err := VerifySEP3004(bytes.NewReader(out), pub)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != int64(len(ls)-1) || !res.Signed || !res.SignaturesChecked || len(res.Unprotected) > 0 {
		t.Errorf("verified %+v; want %d signed records", res, len(ls)-1)
	}
	if !IsSEP3004(out) || IsSEP3004(export(t, nil)) {
		t.Error("IsSEP3004 does not tell the formats apart")
	}
	// Unsigned: verifies without a key, is refused with one.
	plain := exportSEP(t, nil)
	if res, err := VerifySEP3004(bytes.NewReader(plain), nil); err != nil || res.Signed {
		t.Errorf("unsigned export: %+v %v", res, err)
	}
	if _, err := VerifySEP3004(bytes.NewReader(plain), pub); !isRecordErr(err, 1, "is not signed") {
		t.Errorf("unsigned export with a public key: %v", err)
	}
	// Signed, verified without the key: the chain and the receipts' shape.
	if res, err := VerifySEP3004(bytes.NewReader(out), nil); err != nil || !res.Signed || res.SignaturesChecked {
		t.Errorf("signed export without the key: %+v %v", res, err)
	}
	// Every record has the core, the outcome enum and the airlock
	// extension; decisions and results say what happened.
	for _, want := range []string{`"outcome":"deferred"`, `"outcome":"allowed"`, `"extensions":{"airlock":{`, `"event_type":"policy_decision"`, `"event_type":"export_sealed"`, `"previous_hash":null`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the export has no %s", want)
		}
	}
	for i, l := range ls {
		if bytes.Contains(l, []byte(`"event_type":"policy_decision"`)) &&
			(bytes.Contains(l, []byte(`"outcome":"error"`)) || bytes.Contains(l, []byte(`"tool_name":null`))) {
			t.Errorf("record %d: a decision without its outcome or tool: %s", i+1, l)
		}
		if bytes.Contains(l, []byte(`"event_type":"policy_decision"`)) && bytes.Contains(l, []byte(`"effect":"require_approval"`)) && !bytes.Contains(l, []byte(`"outcome":"deferred"`)) {
			t.Errorf("record %d: an approval required is not deferred: %s", i+1, l)
		}
	}
	if bytes.Contains(out, []byte(`"attempts":1`)) || !bytes.Contains(out, []byte(`"attempts":"`)) {
		t.Error("numbers are not written as strings")
	}
}

func isRecordErr(err error, index int, problem string) bool {
	var re *RecordError
	return errors.As(err, &re) && re.Index == index && strings.Contains(re.Problem, problem)
}

// TestSEP3004Tampering: each change to a signed export is refused at the
// record it breaks, saying what failed.
func TestSEP3004Tampering(t *testing.T) {
	pub, priv := newKey(t)
	otherPub, otherPriv := newKey(t)
	out := exportSEP(t, priv)
	ls := lines(out)
	n := len(ls)
	edit := func(i int, f func([]byte) []byte) []byte {
		c := make([][]byte, n)
		copy(c, ls)
		c[i] = f(bytes.Clone(ls[i]))
		return join(c)
	}
	replace := func(i int, old, new string) []byte {
		if !bytes.Contains(ls[i], []byte(old)) {
			t.Fatalf("record %d has no %s: %s", i+1, old, ls[i])
		}
		return edit(i, func(b []byte) []byte { return bytes.Replace(b, []byte(old), []byte(new), 1) })
	}
	drop := func(i int) []byte {
		c := append(append([][]byte{}, ls[:i]...), ls[i+1:]...)
		return join(c)
	}
	swapped := func(i, j int) []byte {
		c := append([][]byte{}, ls...)
		c[i], c[j] = c[j], c[i]
		return join(c)
	}
	// A record's outcome flipped, a byte of a task ID changed, a byte of a
	// signature changed.
	var decision int
	for i, l := range ls {
		if bytes.Contains(l, []byte(`"outcome":"allowed"`)) && bytes.Contains(l, []byte(`"event_type":"policy_decision"`)) {
			decision = i
			break
		}
	}
	sigFlip := edit(2, func(b []byte) []byte {
		i := bytes.Index(b, []byte(`"signature":"`)) + len(`"signature":"`) + 5
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return b
	})
	var otherOut bytes.Buffer
	x := NewSEP3004Exporter(&otherOut, otherPriv)
	_ = x.Write(build(t, tasks[0].runs, nil))
	_ = x.Seal(time.Now())

	for _, tc := range []struct {
		name    string
		file    []byte
		key     ed25519.PublicKey
		index   int
		problem string
	}{
		{"an outcome changed", replace(decision, `"outcome":"allowed"`, `"outcome":"denied"`), pub, decision + 1, "event_hash mismatch"},
		{"a byte of a record changed", replace(3, `"task":"`, `"task":"X`), pub, 4, "event_hash mismatch"},
		{"a byte of a signature changed", sigFlip, pub, 3, "signature does not verify"},
		{"a byte of the event_hash changed", edit(4, func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"event_hash":"`)) + len(`"event_hash":"`)
			if b[i] == '0' {
				b[i] = '1'
			} else {
				b[i] = '0'
			}
			return b
		}), pub, 5, "event_hash mismatch"},
		{"two records reordered", swapped(1, 2), pub, 2, "previous_hash is not the event_hash of record 1"},
		{"a record removed", drop(5), pub, 6, "previous_hash is not the event_hash of record 5"},
		{"the first record removed", drop(0), pub, 1, "previous_hash is not null"},
		{"the last record before the seal removed", drop(n - 2), pub, n - 1, "previous_hash is not the event_hash"},
		{"the seal removed", drop(n - 1), pub, n - 1, "without the seal"},
		{"the seal removed, unsigned check", drop(n - 1), nil, n - 1, "without the seal"},
		{"a record after the seal", append(bytes.Clone(out), ls[0]...), pub, n + 1, "follows the seal"},
		{"the wrong public key", out, otherPub, 1, "not by the public key given"},
		{"another key's export", otherOut.Bytes(), pub, 1, "not by the public key given"},
		{"a receipt removed", edit(3, func(b []byte) []byte {
			i := bytes.Index(b, []byte(`,"receipt":{`))
			j := bytes.Index(b[i:], []byte("}")) + i + 1
			return append(b[:i:i], b[j:]...)
		}), nil, 4, "has no receipt"},
		{"a duplicated key", edit(0, func(b []byte) []byte {
			return append([]byte(`{"outcome":"denied",`), b[1:]...)
		}), pub, 1, "appears more than once"},
		{"trailing bytes", edit(1, func(b []byte) []byte { return append(b, " {}"...) }), pub, 2, "not one JSON record"},
		{"a line reformatted", edit(1, func(b []byte) []byte { return bytes.Replace(b, []byte(`,"event_id":`), []byte(`, "event_id":`), 1) }), pub, 2, "not the record's canonical JSON"},
		{"an escape in the receipt", edit(1, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"alg":"Ed25519"`), []byte(`"alg":"\u0045d25519"`), 1)
		}), nil, 2, "not the record's canonical JSON"},
		{"an empty line", edit(1, func([]byte) []byte { return nil }), pub, 2, "an empty line"},
		{"not JSON", []byte("hello\n"), pub, 1, "not one JSON record"},
		{"empty", nil, pub, 1, "no records"},
		{"a huge line", append(append(bytes.Clone(ls[0]), '\n'), bytes.Repeat([]byte("x"), maxRecordLine+1)...), pub, 2, "longer than"},
		{"a deep line", []byte(strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + "\n"), pub, 1, "not one JSON record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VerifySEP3004(bytes.NewReader(tc.file), tc.key)
			if !isRecordErr(err, tc.index, tc.problem) {
				t.Errorf("got %v; want record %d: …%s…", err, tc.index, tc.problem)
			}
		})
	}
}

// TestSEP3004ForgedChain: whoever can rewrite the file can recompute an
// unsigned chain; only the signatures stop that.
func TestSEP3004ForgedChain(t *testing.T) {
	pub, priv := newKey(t)
	_, forger := newKey(t)
	tl := build(t, tasks[0].runs, nil)
	tl.Principal = "mallory"
	for _, key := range []ed25519.PrivateKey{nil, forger} {
		var b bytes.Buffer
		x := NewSEP3004Exporter(&b, key)
		if err := x.Write(tl); err != nil {
			t.Fatal(err)
		}
		_ = x.Seal(time.Now())
		if _, err := VerifySEP3004(bytes.NewReader(b.Bytes()), nil); err != nil {
			t.Fatalf("a recomputed chain: %v", err)
		}
		if _, err := VerifySEP3004(bytes.NewReader(b.Bytes()), pub); !isRecordErr(err, 1, "") {
			t.Errorf("a recomputed chain verified with the public key: %v", err)
		}
	}
	_ = priv
}

// TestSEP3004Values: what the draft protects (strings, booleans, null) is
// what is written, numbers included as strings.
func TestSEP3004Values(t *testing.T) {
	long := strings.Repeat("é", MaxProtectedString+10)
	for in, want := range map[string]string{
		"  padded  ":      "padded",
		"e\u0301":         "é",
		"two\nlines\t\\x": `two\nlines\t\\x`,
		"bell\x07":        `bell\u0007`,
		"bad\xffutf8":     "bad\uFFFDutf8",
	} {
		got := protectString(in)
		if got != want || checkString(got) != "" {
			t.Errorf("protectString(%q) = %q (%s), want %q", in, got, checkString(got), want)
		}
	}
	got := protectString(long)
	if checkString(got) != "" || utf16Len(got) > MaxProtectedString || !strings.Contains(got, "cut from 8202 UTF-16 code units; sha256:") {
		t.Errorf("a long string: %d units, %s", utf16Len(got), checkString(got))
	}
	for _, bad := range []string{" x", "x ", "a\nb", "e\u0301", long} {
		if checkString(bad) == "" {
			t.Errorf("checkString(%q) accepted it", bad)
		}
	}
	// A record whose hash was recomputed over a bare number, or over an
	// unnormalized string, is refused by its path.
	for _, tc := range []struct {
		value any
		want  string
	}{{int64(3), "$.extensions.airlock.n is a number"}, {"a\tb", "$.extensions.airlock.n holds a control character"}} {
		body := map[string]any{"event_id": "t#1", "occurred_at": "2026-06-06T12:00:00.000Z", "principal_id": "p", "event_type": "x",
			"tool_name": nil, "outcome": "allowed", "previous_hash": nil,
			"extensions": map[string]any{"airlock": map[string]any{"task": "t", "n": tc.value}}}
		canon, _ := jsoncanon.JCS(body)
		sum := sha256.Sum256(canon)
		body["event_hash"] = hex.EncodeToString(sum[:])
		line, _ := jsoncanon.JCS(body)
		if _, err := VerifySEP3004(bytes.NewReader(line), nil); !isRecordErr(err, 1, tc.want) {
			t.Errorf("%v: %v", tc.value, err)
		}
	}
}

func TestSEP3004Outcomes(t *testing.T) {
	for _, tc := range []struct {
		typ  string
		f    map[string]any
		want string
	}{
		{EventPolicyDecision, map[string]any{"effect": "allow"}, OutcomeAllowed},
		{EventPolicyDecision, map[string]any{"effect": "deny"}, OutcomeDenied},
		{EventPolicyDecision, map[string]any{"effect": "require_approval"}, OutcomeDeferred},
		{EventApprovalDecided, map[string]any{"approve": true}, OutcomeAllowed},
		{EventApprovalDecided, map[string]any{"approve": false}, OutcomeDenied},
		{EventApprovalClosed, map[string]any{"state": "expired"}, OutcomeDenied},
		{EventCallFinished, map[string]any{"outcome": "ok"}, OutcomeAllowed},
		{EventCallFinished, map[string]any{"outcome": "denied"}, OutcomeDenied},
		{EventCallFinished, map[string]any{"outcome": "unavailable"}, OutcomeError},
		{EventCallRequested, nil, OutcomeDeferred},
		{EventTaskEnded, map[string]any{"end": "failed"}, OutcomeError},
		{EventTaskStarted, nil, OutcomeAllowed},
	} {
		if got := outcomeOf(tc.typ, tc.f); got != tc.want {
			t.Errorf("%s %v: %s, want %s", tc.typ, tc.f, got, tc.want)
		}
	}
}

// FuzzProtectString: whatever a field holds, the string written is one
// the verifier accepts.
func FuzzProtectString(f *testing.F) {
	for _, s := range []string{"", " ", "\n\u0303", "a\x00b", "\u0958", " \u0301x ", "\xff\xfe", strings.Repeat("\u0958", 5000), strings.Repeat("a\n", 5000), strings.Repeat("😀", 4097)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got := protectString(s); checkString(got) != "" {
			t.Errorf("protectString(%q) = %q: %s", s, got, checkString(got))
		}
	})
}

// TestProtectStringRandom: strings drawn from the characters that make
// normalization hard (controls, combining marks, spaces, letters an escape
// ends in, expanding and astral characters) all come out acceptable.
func TestProtectStringRandom(t *testing.T) {
	alphabet := []rune{' ', 'n', 't', 'r', 'u', '0', '\\', '\n', '\t', '\r', 0, 0x7f, 0x85, 0x0301, 0x0303, 0x0308, 0x0958, 0x212b, 'e', 'A', 0x1F600, 0x00a0, 0x1100, 0x1161, 0x11a8}
	var seed [8]byte
	for i := 0; i < 20000; i++ {
		if _, err := rand.Read(seed[:]); err != nil {
			t.Fatal(err)
		}
		n := int(seed[0]) % 24
		if i%500 == 0 {
			n = 8200 + int(seed[1])
		}
		var b strings.Builder
		for j := 0; j < n; j++ {
			if _, err := rand.Read(seed[2:3]); err != nil {
				t.Fatal(err)
			}
			b.WriteRune(alphabet[int(seed[2])%len(alphabet)])
		}
		s := b.String()
		if got := protectString(s); checkString(got) != "" {
			t.Fatalf("protectString(%q) = %q: %s", s, got, checkString(got))
		}
	}
}
