package timeline

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/jsoncanon"
	"github.com/airlock-run/airlock/internal/signkey"
)

// The SEP-3004 export (airlock audit export --format sep-3004) writes the
// records of the draft "Tamper-Evident Audit Record Contract"
// (SEP3004Revision), one JSON object a line:
//
//   - The core: event_id, occurred_at (RFC 3339, UTC, milliseconds, Z),
//     principal_id, event_type (the Event* constants), tool_name (null
//     for events without a tool), outcome (allowed, denied, deferred,
//     error), extensions and previous_hash (null for the first record,
//     else the event_hash of the record before).
//   - extensions holds airlock's own fields under the type id "airlock"
//     (task, run and the event's fields as the default export has them);
//     the last record, the seal, holds "airlock-export" instead.
//   - Protected values are strings, booleans and null, as the draft
//     requires: numbers are written as decimal strings; strings are NFC,
//     without leading or trailing spaces, without control characters
//     (written escaped, \n as the two characters \ and n) and at most
//     8192 UTF-16 code units (longer ones are cut, the SHA-256 of the
//     whole appended).
//   - event_hash is the lowercase hex SHA-256 of the protected body (the
//     core without event_hash) in RFC 8785 canonical JSON (JCS), which for
//     such values is also the draft's sorted-key canonical form.
//   - receipt, when the export is signed: {"alg":"Ed25519","key_id":
//     "sha256:<hex of the public key>","signature":"<base64>"}, a detached
//     Ed25519 signature of the same canonical bytes. It is outside the
//     protected body (the draft has verifiers ignore top-level members
//     they do not know).
//   - The last record is the seal (event_type export_sealed): it counts
//     the records before it, carries the draft's attestation manifest and
//     is chained and signed like the others, so a verifier refuses a file
//     cut short, even by its last record, and (with the public key) one
//     whose seal was rewritten.
//   - Each line is the whole record in RFC 8785 form, so the file is
//     byte-exact: verify refuses a line that is not.

// SEP3004Revision names the draft implemented.
const SEP3004Revision = "SEP-3004 draft 2026-06-02 (modelcontextprotocol/modelcontextprotocol PR #3004, seps/0000-tamper-evident-audit-record-contract.md at b73612f5)"

// SEP3004 names and limits.
const (
	// CanonicalFormVersion is the attestation manifest's
	// canonical_form_version.
	CanonicalFormVersion = "airlock-sep3004/1 (RFC 8785 JCS of the protected body; strings, booleans and null only)"
	// ExtAirlock is the type id of airlock's fields in each record.
	ExtAirlock = "airlock"
	// ExtExport is the type id of the seal's fields.
	ExtExport = "airlock-export"
	// EventExportSealed is the seal's event_type.
	EventExportSealed = "export_sealed"
	// MaxProtectedString is the draft's baseline cap on a protected
	// string, in UTF-16 code units.
	MaxProtectedString = 8192
	// maxRecordLine bounds one line a verifier reads.
	maxRecordLine = 16 << 20
)

// Outcomes: the draft's closed disposition enum.
const (
	OutcomeAllowed  = "allowed"
	OutcomeDenied   = "denied"
	OutcomeDeferred = "deferred"
	OutcomeError    = "error"
)

// SEP3004Exporter writes the records of one or more timelines as one
// chain, signed when it has a key, and the seal that ends it.
type SEP3004Exporter struct {
	w    io.Writer
	key  ed25519.PrivateKey // nil: unsigned
	n    int64
	prev string // "" before the first record
}

// NewSEP3004Exporter starts a chain on w; key nil writes no receipts.
func NewSEP3004Exporter(w io.Writer, key ed25519.PrivateKey) *SEP3004Exporter {
	return &SEP3004Exporter{w: w, key: key}
}

// Records is the number of records written so far (the seal included once
// written).
func (x *SEP3004Exporter) Records() int64 { return x.n }

// Last is the event_hash of the last record written.
func (x *SEP3004Exporter) Last() string { return x.prev }

// Write appends the timeline's events, oldest first.
func (x *SEP3004Exporter) Write(tl *Timeline) error {
	evs := events(tl)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	tools := map[string]string{} // a call's events name its tool
	for _, c := range tl.Calls {
		tools[c.ID] = c.Tool
	}
	var buf bytes.Buffer
	for _, e := range evs {
		ext, err := protectValue(e.fields)
		if err != nil {
			return fmt.Errorf("record %d (%s): %w", x.n+1, e.typ, err)
		}
		data, _ := ext.(map[string]any)
		if data == nil {
			data = map[string]any{}
		}
		data["task"] = protectString(tl.Task)
		data["run"] = nil
		if e.run >= 1 && e.run <= len(tl.Runs) {
			data["run"] = protectString(tl.Runs[e.run-1].ID)
		}
		var tool any
		if s, ok := e.fields["tool"].(string); ok && s != "" {
			tool = protectString(s)
		} else if c, ok := e.fields["call"].(string); ok && tools[c] != "" {
			tool = protectString(tools[c])
		}
		principal := tl.Principal
		if principal == "" {
			principal = "unknown"
		}
		body := map[string]any{
			"event_id":     protectString(fmt.Sprintf("%s#%d", tl.Task, x.n+1)),
			"occurred_at":  occurredAt(e.at),
			"principal_id": protectString(principal),
			"event_type":   e.typ,
			"tool_name":    tool,
			"outcome":      outcomeOf(e.typ, e.fields),
			"extensions":   map[string]any{ExtAirlock: data},
		}
		if err := x.append(&buf, body); err != nil {
			return fmt.Errorf("record %d (%s): %w", x.n+1, e.typ, err)
		}
	}
	_, err := x.w.Write(buf.Bytes())
	return err
}

// Seal writes the last record: the count of those before it and the
// draft's attestation manifest (§2.7).
func (x *SEP3004Exporter) Seal(at time.Time) error {
	var kid any
	if x.key != nil {
		kid = signkey.KeyID(x.key.Public().(ed25519.PublicKey))
	}
	body := map[string]any{
		"event_id":     fmt.Sprintf("export#%d", x.n+1),
		"occurred_at":  occurredAt(at),
		"principal_id": "airlock",
		"event_type":   EventExportSealed,
		"tool_name":    nil,
		"outcome":      OutcomeAllowed,
		"extensions": map[string]any{ExtExport: map[string]any{
			"records":                    strconv.FormatInt(x.n, 10),
			"revision":                   SEP3004Revision,
			"chain_algorithm":            "sha-256",
			"canonical_form_version":     CanonicalFormVersion,
			"storage_mechanism":          "an export file written once from the Temporal histories, which are append-only; keep a copy of the seal's event_hash or verify the signed seal",
			"verification_procedure_ref": "airlock audit verify FILE --public-key PUBLIC_KEY_FILE",
			"signing_key_id":             kid,
		}},
	}
	var buf bytes.Buffer
	if err := x.append(&buf, body); err != nil {
		return fmt.Errorf("the seal: %w", err)
	}
	_, err := x.w.Write(buf.Bytes())
	return err
}

// append chains, hashes and signs body and writes its line to buf.
func (x *SEP3004Exporter) append(buf *bytes.Buffer, body map[string]any) error {
	body["previous_hash"] = nil
	if x.prev != "" {
		body["previous_hash"] = x.prev
	}
	canon, err := jsoncanon.JCS(body)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(canon)
	rec := make(map[string]any, len(body)+2)
	for k, v := range body {
		rec[k] = v
	}
	rec["event_hash"] = hex.EncodeToString(sum[:])
	if x.key != nil {
		rec["receipt"] = map[string]any{
			"alg":       "Ed25519",
			"key_id":    signkey.KeyID(x.key.Public().(ed25519.PublicKey)),
			"signature": base64.StdEncoding.EncodeToString(ed25519.Sign(x.key, canon)),
		}
	}
	line, err := jsoncanon.JCS(rec)
	if err != nil {
		return err
	}
	buf.Write(line)
	buf.WriteByte('\n')
	x.n++
	x.prev = rec["event_hash"].(string)
	return nil
}

// occurredAt is the draft's timestamp form: UTC, milliseconds, "Z".
func occurredAt(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

var occurredAtRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// outcomeOf maps an event to the draft's disposition: what governance
// let happen (allowed), refused (denied), holds for a later decision
// (deferred), or could not establish (error: the call's outcome is not
// known, its upstream failed or was unreachable, the task failed).
func outcomeOf(typ string, f map[string]any) string {
	str := func(k string) string { // typed strings (api.Effect, api.Outcome) too
		if v, ok := f[k]; ok && v != nil {
			return fmt.Sprint(v)
		}
		return ""
	}
	switch typ {
	case EventCallRequested, EventApprovalRequested, EventApprovalEscalated:
		return OutcomeDeferred
	case EventPolicyDecision:
		switch api.Effect(str("effect")) {
		case api.Allow:
			return OutcomeAllowed
		case api.Deny:
			return OutcomeDenied
		case api.RequireApproval:
			return OutcomeDeferred
		}
		return OutcomeError
	case EventApprovalDecided:
		if ok, _ := f["approve"].(bool); ok {
			return OutcomeAllowed
		}
		return OutcomeDenied
	case EventApprovalClosed:
		switch str("state") {
		case api.ApprovalApproved:
			return OutcomeAllowed
		case api.ApprovalPending:
			return OutcomeDeferred
		}
		return OutcomeDenied
	case EventCallFinished, EventCallAttempt, EventCapture:
		switch api.Outcome(str("outcome")) {
		case api.OutcomeOK, api.OutcomeToolError:
			return OutcomeAllowed
		case api.OutcomeDenied, api.OutcomeRejected, api.OutcomeLimit, api.OutcomeLocked, api.OutcomeCancelled:
			return OutcomeDenied
		}
		return OutcomeError
	case EventTaskEnded:
		switch str("end") {
		case "failed", "timed_out", "rollback_failed":
			return OutcomeError
		}
	}
	return OutcomeAllowed
}

// protectValue is v with every value the draft can protect: numbers as
// decimal strings, strings through protectString. v goes through JSON
// first, so any field type the timeline holds is handled alike.
func protectValue(v any) (any, error) {
	g, err := generic(v)
	if err != nil {
		return nil, err
	}
	return protectWalk(g), nil
}

func protectWalk(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = protectWalk(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = protectWalk(e)
		}
		return x
	case json.Number:
		return string(x)
	case string:
		return protectString(x)
	}
	return v
}

// protectString is s as the draft protects strings: NFC, control
// characters escaped (\n, \t, \r, \u0001; a backslash then doubled),
// leading and trailing U+0020 trimmed, and at most MaxProtectedString
// UTF-16 code units (longer: cut, with the whole's length and SHA-256
// appended).
func protectString(s string) string {
	s = norm.NFC.String(strings.ToValidUTF8(s, "\uFFFD"))
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		var b strings.Builder
		for _, r := range s {
			switch {
			case r == '\\':
				b.WriteString(`\\`)
			case r == '\n':
				b.WriteString(`\n`)
			case r == '\r':
				b.WriteString(`\r`)
			case r == '\t':
				b.WriteString(`\t`)
			case unicode.IsControl(r):
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				b.WriteRune(r)
			}
		}
		// Again: an escape's last letter may compose with a combining
		// mark that followed the control character (\n + U+0303 is ñ).
		s = norm.NFC.String(b.String())
	}
	s = strings.Trim(s, " ")
	n := utf16Len(s)
	if n <= MaxProtectedString {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	suffix := fmt.Sprintf(" …[cut from %d UTF-16 code units; sha256:%s]", n, hex.EncodeToString(sum[:]))
	for room := MaxProtectedString - utf16Len(suffix); ; room -= 8 {
		cut, used := 0, 0
		for i, r := range s {
			w := utf16.RuneLen(r)
			if used+w > room {
				break
			}
			used += w
			cut = i + utf8.RuneLen(r)
		}
		// NFC again: the cut may split a sequence that composes.
		out := strings.Trim(norm.NFC.String(s[:cut]), " ") + suffix
		if utf16Len(out) <= MaxProtectedString {
			return out
		}
	}
}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// checkString says why s is not a protected string as the draft
// defines one, or "".
func checkString(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "holds a control character"
	case strings.HasPrefix(s, " ") || strings.HasSuffix(s, " "):
		return "begins or ends with a space"
	case !norm.NFC.IsNormalString(s):
		return "is not in Unicode NFC"
	case utf16Len(s) > MaxProtectedString:
		return fmt.Sprintf("is longer than %d UTF-16 code units", MaxProtectedString)
	}
	return ""
}

// RecordError locates the first record that does not verify. Index is
// the record's position in the file, 1-based (its line).
type RecordError struct {
	Index   int
	EventID string
	Problem string
}

func (e *RecordError) Error() string {
	if e.EventID != "" {
		return fmt.Sprintf("record %d (event_id %s): %s", e.Index, e.EventID, e.Problem)
	}
	return fmt.Sprintf("record %d: %s", e.Index, e.Problem)
}

// SEP3004Verified is what VerifySEP3004 found in an intact file.
type SEP3004Verified struct {
	// Records counts the records before the seal.
	Records int64
	// Signed: every record has a receipt; KeyID names the key that
	// signed them. SignaturesChecked: they were verified with the public
	// key given.
	Signed, SignaturesChecked bool
	KeyID                     string
	// Seal is the seal's event_hash.
	Seal string
	// Unprotected lists top-level members that no signature or hash
	// covers (the draft has verifiers ignore them), as "record N: name".
	Unprotected []string
}

// IsSEP3004 reports that b's first line is a SEP-3004 record (an object
// with an event_hash) rather than a default export.
func IsSEP3004(b []byte) bool {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	var probe struct {
		EventHash *json.RawMessage `json:"event_hash"`
	}
	return json.Unmarshal(line, &probe) == nil && probe.EventHash != nil
}

var hashRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// VerifySEP3004 checks a file written by SEP3004Exporter: each record's
// core, values and event_hash, the chain of previous_hash, the seal
// that ends it and, when pub is not nil, each record's receipt against
// pub (every record must then be signed). It returns a *RecordError for
// the first record that does not verify.
func VerifySEP3004(r io.Reader, pub ed25519.PublicKey) (SEP3004Verified, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxRecordLine)
	var res SEP3004Verified
	var prev string
	seen := map[string]int{}
	sealedAt := 0
	i := 0
	for sc.Scan() {
		i++
		if sealedAt > 0 {
			return res, &RecordError{Index: i, Problem: fmt.Sprintf("follows the seal (record %d): records were added after the export ended", sealedAt)}
		}
		rec, canon, err := checkRecord(sc.Bytes(), i, prev, seen)
		if err != nil {
			return res, err
		}
		id := rec["event_id"].(string)
		fail := func(format string, args ...any) error {
			return &RecordError{Index: i, EventID: id, Problem: fmt.Sprintf(format, args...)}
		}
		kid, signed, err := checkReceipt(rec, canon, pub)
		if err != nil {
			return res, fail("%v", err)
		}
		switch {
		case i == 1:
			res.Signed, res.KeyID = signed, kid
		case signed != res.Signed:
			if signed {
				return res, fail("is signed, and the records before it are not")
			}
			return res, fail("has no receipt, and the records before it are signed: the receipt was removed")
		case kid != res.KeyID:
			return res, fail("is signed by key %s, the records before it by %s", kid, res.KeyID)
		}
		for k := range rec {
			if !protectedMember[k] && k != "event_hash" && k != "receipt" {
				res.Unprotected = append(res.Unprotected, fmt.Sprintf("record %d: %s", i, k))
			}
		}
		exts := rec["extensions"].(map[string]any)
		if rec["event_type"] == EventExportSealed {
			seal, ok := exts[ExtExport].(map[string]any)
			if !ok {
				return res, fail("is a seal without its %q extension", ExtExport)
			}
			if n, _ := seal["records"].(string); n != strconv.Itoa(i-1) {
				return res, fail("the seal counts %q records, and %d come before it: records were removed or added", n, i-1)
			}
			if k, _ := seal["signing_key_id"].(string); k != res.KeyID {
				return res, fail("the seal names signing key %q, and the records are signed by %q", k, res.KeyID)
			}
			sealedAt = i
			res.Seal = rec["event_hash"].(string)
		} else {
			data, ok := exts[ExtAirlock].(map[string]any)
			if !ok {
				return res, fail("has no %q extension", ExtAirlock)
			}
			if s, _ := data["task"].(string); s == "" {
				return res, fail("its %q extension has no task", ExtAirlock)
			}
			res.Records++
		}
		prev = rec["event_hash"].(string)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return res, &RecordError{Index: i + 1, Problem: fmt.Sprintf("is longer than %d bytes", maxRecordLine)}
		}
		return res, err
	}
	if i == 0 {
		return res, &RecordError{Index: 1, Problem: "no records: the file is empty"}
	}
	if sealedAt == 0 {
		return res, &RecordError{Index: i, Problem: fmt.Sprintf("the file ends after record %d without the seal (event_type %s): records at its end were cut off, or the seal removed", i, EventExportSealed)}
	}
	res.SignaturesChecked = res.Signed && pub != nil
	return res, nil
}

// protectedMember are the core members the event_hash covers.
var protectedMember = map[string]bool{
	"event_id": true, "occurred_at": true, "principal_id": true, "event_type": true,
	"tool_name": true, "outcome": true, "extensions": true, "previous_hash": true,
}

// checkRecord reads one line as a record and checks its core, values,
// event_hash and previous_hash; it returns the record and its canonical
// protected body.
func checkRecord(line []byte, i int, prev string, seen map[string]int) (map[string]any, []byte, error) {
	fail := func(id, format string, args ...any) (map[string]any, []byte, error) {
		return nil, nil, &RecordError{Index: i, EventID: id, Problem: fmt.Sprintf(format, args...)}
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return fail("", "an empty line")
	}
	v, err := jsoncanon.Decode(line)
	if err != nil {
		var dup *jsoncanon.DuplicateKeyError
		if errors.As(err, &dup) {
			return fail("", "not a record: %v", err)
		}
		return fail("", "not one JSON record: %v", err)
	}
	rec, ok := v.(map[string]any)
	if !ok {
		return fail("", "not a JSON object")
	}
	id, _ := rec["event_id"].(string)
	if id == "" || checkString(id) != "" {
		return fail("", "no event_id (a non-empty string)")
	}
	if j, ok := seen[id]; ok {
		return fail(id, "the event_id of record %d again", j)
	}
	seen[id] = i
	for _, k := range []string{"principal_id", "event_type"} {
		if s, _ := rec[k].(string); s == "" {
			return fail(id, "no %s (a non-empty string)", k)
		}
	}
	if s, _ := rec["occurred_at"].(string); !occurredAtRE.MatchString(s) {
		return fail(id, "occurred_at %v is not RFC 3339 in UTC with milliseconds (2026-06-02T12:00:00.000Z)", rec["occurred_at"])
	} else if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
		return fail(id, "occurred_at %q: %v", s, err)
	}
	if t, present := rec["tool_name"]; !present {
		return fail(id, "no tool_name (a string, or null)")
	} else if _, ok := t.(string); !ok && t != nil {
		return fail(id, "tool_name is neither a string nor null")
	}
	switch rec["outcome"] {
	case OutcomeAllowed, OutcomeDenied, OutcomeDeferred, OutcomeError:
	default:
		return fail(id, "outcome %v is not one of allowed, denied, deferred, error", rec["outcome"])
	}
	exts, ok := rec["extensions"].(map[string]any)
	if !ok || len(exts) == 0 {
		return fail(id, "no extensions (an object with at least one extension)")
	}
	for k, e := range exts {
		if _, ok := e.(map[string]any); !ok {
			return fail(id, "extension %q is not an object", k)
		}
	}
	if a, ok := rec["anchor_witness"]; ok && a != nil {
		return fail(id, "anchor_witness is reserved and must be absent or null in this version")
	}
	body := map[string]any{}
	for k := range protectedMember {
		if e, ok := rec[k]; ok {
			body[k] = e
		}
	}
	if path, why := checkProtected(body, "$"); why != "" {
		return fail(id, "%s %s", path, why)
	}
	canon, err := jsoncanon.JCS(body)
	if err != nil {
		return fail(id, "%v", err)
	}
	h, _ := rec["event_hash"].(string)
	if !hashRE.MatchString(h) {
		return fail(id, "event_hash is not 64 lowercase hex digits")
	}
	sum := sha256.Sum256(canon)
	if hex.EncodeToString(sum[:]) != h {
		return fail(id, "event_hash mismatch: the record was changed after it was written")
	}
	p, present := rec["previous_hash"]
	switch {
	case !present:
		return fail(id, "no previous_hash")
	case i == 1 && p != nil:
		return fail(id, "previous_hash is not null, so records before this one are missing")
	case i > 1 && p != prev:
		return fail(id, "previous_hash is not the event_hash of record %d: a record before it is missing, added or out of order", i-1)
	}
	// The exporter writes each line in RFC 8785 form, so the file is
	// byte-exact: a change outside what the hash covers (spacing, member
	// order, an escape) is found too.
	if whole, err := jsoncanon.JCS(rec); err != nil || !bytes.Equal(whole, line) {
		return fail(id, "the line is not the record's canonical JSON (RFC 8785): it was reformatted or changed")
	}
	return rec, canon, nil
}

// checkProtected finds a value the draft does not protect: a number, or
// a string that is not normalized.
func checkProtected(v any, path string) (string, string) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p, why := checkProtected(x[k], path+"."+k); why != "" {
				return p, why
			}
		}
	case []any:
		for i, e := range x {
			if p, why := checkProtected(e, path+"["+strconv.Itoa(i)+"]"); why != "" {
				return p, why
			}
		}
	case string:
		if why := checkString(x); why != "" {
			return path, why
		}
	case nil, bool:
	default:
		return path, "is a number; SEP-3004 protects only strings, booleans and null"
	}
	return "", ""
}

// checkReceipt checks rec's receipt: its shape always, its signature of
// canon when pub is not nil (which also requires one). It returns the
// receipt's key ID and whether there is one.
func checkReceipt(rec map[string]any, canon []byte, pub ed25519.PublicKey) (string, bool, error) {
	raw, ok := rec["receipt"]
	if !ok {
		if pub != nil {
			return "", false, errors.New("is not signed (no receipt), and --public-key asks that every record be signed")
		}
		return "", false, nil
	}
	rc, ok := raw.(map[string]any)
	if !ok {
		return "", false, errors.New("its receipt is not an object")
	}
	if rc["alg"] != "Ed25519" {
		return "", false, fmt.Errorf("its receipt's alg is %v, not Ed25519", rc["alg"])
	}
	kid, _ := rc["key_id"].(string)
	if !strings.HasPrefix(kid, "sha256:") || !hashRE.MatchString(strings.TrimPrefix(kid, "sha256:")) {
		return "", false, errors.New(`its receipt's key_id is not "sha256:" and 64 hex digits`)
	}
	s, _ := rc["signature"].(string)
	sig, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return "", false, fmt.Errorf("its receipt's signature is not %d bytes in base64", ed25519.SignatureSize)
	}
	if pub == nil {
		return kid, true, nil
	}
	if want := signkey.KeyID(pub); kid != want {
		return "", false, fmt.Errorf("is signed by key %s, not by the public key given (%s): the wrong public key, or the receipt was changed", kid, want)
	}
	if !ed25519.Verify(pub, canon, sig) {
		return "", false, errors.New("its signature does not verify with the public key: the record or its receipt was changed")
	}
	return kid, true, nil
}
