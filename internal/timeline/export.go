package timeline

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// The export is JSON lines, one record per event, chained by SHA-256:
//
//   - A record is a JSON object with seq (1, 2, 3, … across the whole
//     file), time (RFC 3339, UTC, nanoseconds), task, run (the run ID),
//     type (the Event* constants), the event's fields, prev and hash.
//   - body is the record without hash, as canonical JSON: members sorted
//     by key at every depth, no whitespace between tokens.
//   - hash is the lowercase hex SHA-256 of body. The body includes prev,
//     so each hash covers the whole chain before it.
//   - The line is body with its final "}" replaced by ,"hash":"<hash>"}:
//     hash is always the last member, so a verifier needs no JSON
//     canonicalisation: it cuts the last 75 bytes of the line
//     (,"hash":"<64 hex digits>"}), appends "}", and hashes that.
//   - prev is the lowercase hex SHA-256 of the previous line's bytes (its
//     "\n" excluded); the first record's prev is 64 zeros.
//
// A changed byte breaks that record's hash (or its JSON); a removed,
// inserted or reordered record breaks the next record's prev and seq. A
// chain cut short at its end still verifies: keep the last hash that
// verify prints somewhere else to detect that.

// ZeroHash is the prev of the first record.
var ZeroHash = strings.Repeat("0", 64)

// Exporter writes the records of one or more timelines as one chain.
type Exporter struct {
	w    io.Writer
	seq  int64
	prev string
}

// NewExporter starts a chain on w.
func NewExporter(w io.Writer) *Exporter { return &Exporter{w: w, prev: ZeroHash} }

// Records is the number of records written so far.
func (x *Exporter) Records() int64 { return x.seq }

// Last is the SHA-256 of the last line written (ZeroHash before any).
func (x *Exporter) Last() string { return x.prev }

// Write appends the timeline's events, oldest first.
func (x *Exporter) Write(tl *Timeline) error {
	evs := events(tl)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	var buf bytes.Buffer
	for _, e := range evs {
		rec := map[string]any{}
		for k, v := range e.fields {
			rec[k] = v
		}
		rec["seq"] = x.seq + 1
		rec["time"] = e.at.UTC().Format(time.RFC3339Nano)
		rec["task"] = tl.Task
		rec["type"] = e.typ
		if e.run >= 1 && e.run <= len(tl.Runs) {
			rec["run"] = tl.Runs[e.run-1].ID
		}
		rec["prev"] = x.prev
		line, err := sealRecord(rec)
		if err != nil {
			return fmt.Errorf("record %d (%s): %w", x.seq+1, e.typ, err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
		x.seq++
		x.prev = lineHash(line)
	}
	_, err := x.w.Write(buf.Bytes())
	return err
}

// sealRecord is the record's line: its canonical body with the hash
// appended as the last member.
func sealRecord(rec map[string]any) ([]byte, error) {
	body, err := canonical(rec)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	line := append(body[:len(body)-1:len(body)-1], `,"hash":"`...)
	line = append(line, hex.EncodeToString(sum[:])...)
	return append(line, `"}`...), nil
}

// canonical is v as JSON with members sorted by key at every depth and no
// whitespace: encoding/json sorts map keys, so v goes through a generic
// value first (numbers kept exact).
func canonical(v any) ([]byte, error) {
	g, err := generic(v)
	if err != nil {
		return nil, err
	}
	return marshal(g)
}

// generic is v through JSON as a generic value (maps, slices, strings,
// json.Number, bools, nil), numbers kept exact.
func generic(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil, err
	}
	return g, nil
}

// marshal is compact JSON without HTML escaping (arguments are shown to
// people; "<" should read as "<"): the chain hashes exactly these bytes.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// ChainError locates the first record that breaks the chain.
type ChainError struct {
	Line int // 1-based
	// Seq is the record's seq when it could be read, else 0.
	Seq     int64
	Problem string
}

func (e *ChainError) Error() string {
	if e.Seq > 0 {
		return fmt.Sprintf("line %d (seq %d): %s", e.Line, e.Seq, e.Problem)
	}
	return fmt.Sprintf("line %d: %s", e.Line, e.Problem)
}

// Verified is what Verify found in an intact chain.
type Verified struct {
	Records int64
	// Last is the SHA-256 of the last line: record it elsewhere to detect
	// a chain cut short later.
	Last string
}

var hashSuffix = regexp.MustCompile(`,"hash":"([^"\\]*)"}$`)

// Verify checks a chain written by Exporter. It returns a *ChainError for
// the first record that does not verify.
func Verify(r io.Reader) (Verified, error) {
	br := bufio.NewReader(r)
	res := Verified{Last: ZeroHash}
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return res, err
		}
		eof := err != nil
		line = bytes.TrimSuffix(line, []byte("\n"))
		if eof && len(line) == 0 {
			if res.Records == 0 {
				return res, &ChainError{Line: n, Problem: "no records"}
			}
			return res, nil
		}
		if err := checkLine(line, res); err != nil {
			err.Line = n
			return res, err
		}
		res.Records++
		res.Last = lineHash(line)
		if eof {
			return res, nil
		}
	}
}

func checkLine(line []byte, sofar Verified) *ChainError {
	wantSeq := sofar.Records + 1
	if len(bytes.TrimSpace(line)) == 0 {
		return &ChainError{Problem: "empty line"}
	}
	var rec struct {
		Seq  *int64  `json:"seq"`
		Prev *string `json:"prev"`
		Hash *string `json:"hash"`
	}
	if !json.Valid(line) || json.Unmarshal(line, &rec) != nil {
		return &ChainError{Problem: "not a JSON record"}
	}
	ce := &ChainError{}
	if rec.Seq != nil {
		ce.Seq = *rec.Seq
	}
	m := hashSuffix.FindSubmatch(line)
	if m == nil || rec.Hash == nil || *rec.Hash != string(m[1]) {
		ce.Problem = `no "hash" as the record's last member`
		return ce
	}
	body := append(bytes.Clone(line[:len(line)-len(m[0])]), '}')
	sum := sha256.Sum256(body)
	if hex.EncodeToString(sum[:]) != *rec.Hash {
		ce.Problem = "hash mismatch: the record was changed"
		return ce
	}
	if rec.Prev == nil || *rec.Prev != sofar.Last {
		ce.Problem = "prev mismatch: the record before it is missing, changed or out of order"
		if rec.Seq != nil && *rec.Seq != wantSeq {
			ce.Problem += fmt.Sprintf(" (seq %d where %d was expected)", *rec.Seq, wantSeq)
		}
		return ce
	}
	if rec.Seq == nil || *rec.Seq != wantSeq {
		ce.Problem = fmt.Sprintf("seq is not %d", wantSeq)
		return ce
	}
	return nil
}
