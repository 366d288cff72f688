// Package pin guards against upstream tool definitions that change under
// airlock ("rug pulls"): every field of a tool definition that reaches the
// agent (name, title, description, schemas, annotations, icons and _meta)
// is read and trusted by the model or its client, so a changed description
// can carry a prompt injection, a changed schema can smuggle arguments and
// a changed _meta or icon can carry either to a client that shows them.
//
// Each tool's definition is hashed (Hash) and the hash is pinned in a JSON
// file (Store). The first time a tool is seen its hash is recorded (trust on
// first use); afterwards a definition whose hash differs from its pin is
// blocked until an operator reviews the change and accepts it with
// `airlock manifests pin SERVER [TOOL]` (Store.Pin). The store notices when
// another process rewrote the file, so a running gateway picks up a new pin
// without a restart.
//
// Pins made before icons and _meta were pinned stay valid for tools that
// have neither (their canonical form, and so their hash, is unchanged); a
// tool that has either is blocked, with a reason that says the pin does not
// cover these fields and the rest is unchanged (Legacy), until it is pinned
// again: they were never reviewed, and trusting them now would let a change
// made before the upgrade through.
package pin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/internal/metrics"
)

// DefaultFile is the name of the pins file in the data directory.
const DefaultFile = "pins.json"

// fileVersion is the format version written to the pins file.
const fileVersion = 1

// Fields are the parts of a tool definition that are pinned, in the order
// messages list them: every field of the MCP SDK's mcp.Tool, which is what
// the gateway sends to agents (an upstream's fields the SDK does not know
// are dropped when the definition is decoded, so they never reach an
// agent).
var Fields = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "_meta"}

// legacyFields are the Fields pinned before icons and _meta were.
var legacyFields = Fields[:6]

// Canonical returns the canonical JSON of the pinned parts of t: an object
// with the keys of Fields (empty ones left out), every object's keys sorted,
// schemas, icons and _meta normalised by a round trip through plain Go
// values (so a json.RawMessage, a *jsonschema.Schema and a map[string]any
// describing the same schema encode the same), numbers in Go's float64 form
// and no HTML escaping.
func Canonical(t *mcp.Tool) ([]byte, error) {
	m, err := canonicalMap(t)
	if err != nil {
		return nil, err
	}
	return encode(m)
}

// canonicalMap is Canonical before encoding.
func canonicalMap(t *mcp.Tool) (map[string]any, error) {
	if t == nil {
		return nil, errors.New("no tool definition")
	}
	m := map[string]any{"name": t.Name}
	if t.Title != "" {
		m["title"] = t.Title
	}
	if t.Description != "" {
		m["description"] = t.Description
	}
	in, err := normalise(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %s: inputSchema: %w", t.Name, err)
	}
	if in != nil {
		m["inputSchema"] = in
	}
	out, err := normalise(t.OutputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %s: outputSchema: %w", t.Name, err)
	}
	if out != nil {
		m["outputSchema"] = out
	}
	if a := annotations(t.Annotations); a != nil {
		m["annotations"] = a
	}
	if len(t.Icons) > 0 {
		icons, err := normalise(t.Icons)
		if err != nil {
			return nil, fmt.Errorf("tool %s: icons: %w", t.Name, err)
		}
		m["icons"] = icons
	}
	if len(t.Meta) > 0 {
		meta, err := normalise(t.Meta)
		if err != nil {
			return nil, fmt.Errorf("tool %s: _meta: %w", t.Name, err)
		}
		m["_meta"] = meta
	}
	return m, nil
}

// Legacy reports whether t differs from its pin old only by icons or _meta
// that old does not cover: the hash of t without them is old's. That is the
// case of every pin made before airlock pinned these fields, of a tool that
// has them (and of a tool whose upstream added them since). Such a tool is
// still blocked (its icons and _meta were never reviewed); messages say
// that the rest is unchanged.
func Legacy(old Pin, t *mcp.Tool) bool {
	if t == nil || (len(t.Icons) == 0 && len(t.Meta) == 0) {
		return false
	}
	m, err := canonicalMap(t)
	if err != nil {
		return false
	}
	for k := range m {
		if !slices.Contains(legacyFields, k) {
			delete(m, k)
		}
	}
	b, err := encode(m)
	return err == nil && hashOf(b) == old.SHA256
}

// Hash is the hex SHA-256 of Canonical(t). It is "" when t cannot be
// encoded as JSON (a client-side definition always can); Check blocks such
// a tool.
func Hash(t *mcp.Tool) string {
	b, err := Canonical(t)
	if err != nil {
		return ""
	}
	return hashOf(b)
}

func hashOf(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:])
}

func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// normalise round-trips a schema through JSON into plain Go values, whose
// maps json.Marshal writes with sorted keys.
func normalise(schema any) (any, error) {
	if schema == nil {
		return nil, nil
	}
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// annotations writes the hints explicitly rather than through the SDK's
// MarshalJSON, whose output depends on MCPGODEBUG (hintomitempty). An
// absent *bool hint stays absent; all-default annotations count as none.
func annotations(a *mcp.ToolAnnotations) map[string]any {
	if a == nil {
		return nil
	}
	m := map[string]any{}
	if a.Title != "" {
		m["title"] = a.Title
	}
	if a.ReadOnlyHint {
		m["readOnlyHint"] = true
	}
	if a.IdempotentHint {
		m["idempotentHint"] = true
	}
	if a.DestructiveHint != nil {
		m["destructiveHint"] = *a.DestructiveHint
	}
	if a.OpenWorldHint != nil {
		m["openWorldHint"] = *a.OpenWorldHint
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// Verdict is what Check found.
type Verdict int

const (
	// Pinned: the definition matches its pin.
	Pinned Verdict = iota + 1
	// New: the tool had no pin; its definition is now pinned (trust on
	// first use) and the tool may be used.
	New
	// Changed: the definition differs from its pin; the tool is blocked.
	Changed
)

func (v Verdict) String() string {
	switch v {
	case Pinned:
		return "pinned"
	case New:
		return "new"
	case Changed:
		return "changed"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Pin is the pinned definition of one tool.
type Pin struct {
	// SHA256 is Hash of the pinned definition; it alone decides.
	SHA256 string `json:"sha256"`
	// Definition is the canonical JSON the hash was taken of, kept so that
	// `airlock manifests pin` can show what changed.
	Definition json.RawMessage `json:"definition,omitempty"`
	PinnedAt   time.Time       `json:"pinned_at"`
	// By says how the pin was made: "first use" or "airlock manifests pin".
	By string `json:"by,omitempty"`
}

// How pins are made, recorded in Pin.By.
const (
	ByFirstUse = "first use"
	ByCommand  = "airlock manifests pin"
)

// document is the pins file.
type document struct {
	Comment string                    `json:"_comment,omitempty"`
	Version int                       `json:"version"`
	Servers map[string]map[string]Pin `json:"servers"`
}

const fileComment = "Pinned upstream tool definitions (airlock). Accept a changed tool with: airlock manifests pin SERVER [TOOL]"

// Store is the pins of every upstream tool, backed by a JSON file. It is
// safe for concurrent use, also by several processes sharing the file
// (writes replace the file atomically and merge with what another process
// wrote since the last read).
type Store struct {
	path string

	mu      sync.Mutex
	pins    map[string]map[string]Pin // server -> tool -> pin
	stamp   stamp                     // of the file the pins were read from
	diskErr error                     // the file on disk cannot be read; pins are the last good ones
	blocked map[string]string         // "server\x00tool" -> hash found blocked (for transitions)
	log     zerolog.Logger
	now     func() time.Time
}

// stamp identifies one version of the file cheaply.
type stamp struct {
	fi fs.FileInfo // nil: the file does not exist
}

func (a stamp) same(b stamp) bool {
	if a.fi == nil || b.fi == nil {
		return a.fi == nil && b.fi == nil
	}
	return os.SameFile(a.fi, b.fi) && a.fi.Size() == b.fi.Size() && a.fi.ModTime().Equal(b.fi.ModTime())
}

// Open reads the pins file at path. A missing file is an empty store (the
// file is created at the first pin); a file that cannot be read or parsed
// is an error naming the file and how to fix it.
func Open(path string) (*Store, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("pins file: no path given")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("pins file %s: %w", path, err)
	}
	s := &Store{path: abs, pins: map[string]map[string]Pin{}, blocked: map[string]string{}, log: zerolog.Nop(), now: time.Now}
	pins, st, err := s.read()
	if err != nil {
		return nil, err
	}
	s.pins, s.stamp = pins, st
	return s, nil
}

// Path is the absolute path of the pins file.
func (s *Store) Path() string { return s.path }

// SetLogger makes the store log what it cannot do on its own (a pins file
// that turned unreadable, a pin that could not be saved). Call it before
// the store is shared.
func (s *Store) SetLogger(log zerolog.Logger) {
	s.mu.Lock()
	s.log = log.With().Str("component", "pins").Str("file", s.path).Logger()
	s.mu.Unlock()
}

// read loads the file and stamps it.
func (s *Store) read() (map[string]map[string]Pin, stamp, error) {
	fi, err := os.Stat(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]map[string]Pin{}, stamp{}, nil
	}
	if err != nil {
		return nil, stamp{}, fmt.Errorf("pins file %s: %w", s.path, unwrapPath(err))
	}
	if fi.IsDir() {
		return nil, stamp{}, fmt.Errorf("pins file %s is a directory; set pins_file in the configuration to a file path", s.path)
	}
	data, err := os.ReadFile(s.path)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("pins file %s: cannot read it: %w", s.path, unwrapPath(err))
	}
	pins, err := parse(data)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("pins file %s is not a valid pins file (%v); fix it by hand, or move it away to pin every tool again when it is next seen (trust on first use) and review each upstream with: airlock manifests pin SERVER", s.path, err)
	}
	return pins, stamp{fi: fi}, nil
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func parse(data []byte) (map[string]map[string]Pin, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return map[string]map[string]Pin{}, nil // an empty file is an empty store
	}
	var doc document
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		return nil, err
	}
	if doc.Version != fileVersion {
		return nil, fmt.Errorf("version %d, want %d", doc.Version, fileVersion)
	}
	pins := map[string]map[string]Pin{}
	for server, tools := range doc.Servers {
		for tool, p := range tools {
			if len(p.SHA256) != 64 {
				return nil, fmt.Errorf("servers.%s.%s.sha256 %q is not a hex SHA-256", server, tool, p.SHA256)
			}
			if _, err := hex.DecodeString(p.SHA256); err != nil {
				return nil, fmt.Errorf("servers.%s.%s.sha256 %q is not a hex SHA-256", server, tool, p.SHA256)
			}
			if pins[server] == nil {
				pins[server] = map[string]Pin{}
			}
			pins[server][tool] = p
		}
	}
	return pins, nil
}

// reloadLocked re-reads the file if another process changed it. A file
// that turned unreadable keeps the last good pins (failing open to "no
// pins" would trust every changed tool) and is reported once.
func (s *Store) reloadLocked() {
	fi, err := os.Stat(s.path)
	cur := stamp{fi: fi}
	if err != nil {
		cur = stamp{}
		if !errors.Is(err, fs.ErrNotExist) {
			s.noteDiskErr(fmt.Errorf("pins file %s: %w", s.path, unwrapPath(err)))
			return
		}
	}
	if cur.same(s.stamp) {
		return
	}
	pins, st, err := s.read()
	if err != nil {
		s.noteDiskErr(err)
		return
	}
	if s.diskErr != nil {
		s.log.Info().Msg("pins file readable again")
	}
	s.pins, s.stamp, s.diskErr = pins, st, nil
}

func (s *Store) noteDiskErr(err error) {
	if s.diskErr == nil || s.diskErr.Error() != err.Error() {
		s.log.Error().Err(err).Msg("pins file unusable; keeping the pins read before, and not writing new ones until it is fixed")
	}
	s.diskErr = err
}

// saveLocked applies mutate to the pins as they are on disk now (merging
// with another process's writes since the last read) and writes the file
// atomically (temporary file and rename). On error s.pins is unchanged.
func (s *Store) saveLocked(mutate func(map[string]map[string]Pin)) error {
	s.reloadLocked()
	if s.diskErr != nil {
		return s.diskErr
	}
	next := clonePins(s.pins)
	mutate(next)
	doc := document{Comment: fileComment, Version: fileVersion, Servers: next}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding pins: %w", err)
	}
	data = append(data, '\n')
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pins file %s: creating its directory: %w", s.path, unwrapPath(err))
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("pins file %s: %w", s.path, unwrapPath(err))
	}
	name := tmp.Name()
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, s.path)
	}
	if err != nil {
		_ = os.Remove(name)
		return fmt.Errorf("pins file %s: writing it: %w", s.path, unwrapPath(err))
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		fi = nil // re-read next time
	}
	s.pins, s.stamp = next, stamp{fi: fi}
	return nil
}

func clonePins(in map[string]map[string]Pin) map[string]map[string]Pin {
	out := make(map[string]map[string]Pin, len(in))
	for server, tools := range in {
		m := make(map[string]Pin, len(tools))
		for k, v := range tools {
			m[k] = v
		}
		out[server] = m
	}
	return out
}

func key(server, tool string) string { return server + "\x00" + tool }

// Result is what Inspect found about one tool definition.
type Result struct {
	Verdict Verdict
	// Reason says why a Changed tool is blocked and how to accept it. It is
	// built from airlock's own words and the server and tool names, never
	// from the new definition, so it is safe to show to a model.
	Reason string
	// Transition is true for the first Changed verdict of a tool after it
	// was usable (or after it changed again): log it once, not on every
	// check.
	Transition bool
}

// Check compares the upstream's current definition of a tool with its pin.
// It returns Pinned when they match; New when the tool had no pin (the
// definition is pinned now, trust on first use, and the tool may be used);
// Changed, with the reason, when they differ: the tool must not be exposed
// or called. The pins file is re-read first if another process changed it.
func (s *Store) Check(server string, t *mcp.Tool) (Verdict, string) {
	r := s.Inspect(server, t)
	return r.Verdict, r.Reason
}

// Inspect is Check, also telling whether this Changed verdict is the
// transition to blocked. It increments metrics.ToolsBlocked once per
// transition.
func (s *Store) Inspect(server string, t *mcp.Tool) Result {
	name := "<nil>"
	if t != nil {
		name = t.Name
	}
	canonical, cerr := Canonical(t)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked()
	k := key(server, name)
	if cerr != nil {
		return s.blockLocked(server, name, k, "unencodable", fmt.Sprintf(
			"upstream %s offers tool %s with a definition airlock cannot encode as JSON (%v), so it cannot be checked against its pin; it stays blocked until the upstream fixes it",
			server, name, cerr))
	}
	h := hashOf(canonical)
	old, ok := s.pins[server][name]
	switch {
	case !ok:
		p := Pin{SHA256: h, Definition: kept(canonical), PinnedAt: s.now().UTC().Truncate(time.Second), By: ByFirstUse}
		err := s.saveLocked(func(m map[string]map[string]Pin) {
			if _, exists := m[server][name]; !exists { // another process may have pinned it meanwhile
				setPin(m, server, name, p)
			}
		})
		if err != nil {
			// Still trusted, in memory, so the tool stays usable and a
			// later change is caught by this process; saving is retried at
			// the next new tool.
			s.log.Error().Err(err).Str("server", server).Str("tool", name).Msg("pin of a new tool not saved; it holds in this process only")
			setPin(s.pins, server, name, p)
		}
		if cur := s.pins[server][name]; cur.SHA256 != h {
			// Another process pinned a different definition first.
			return s.blockLocked(server, name, k, h, changedReason(server, name, cur, t, canonical))
		}
		delete(s.blocked, k)
		return Result{Verdict: New}
	case old.SHA256 == h:
		delete(s.blocked, k)
		return Result{Verdict: Pinned}
	default:
		return s.blockLocked(server, name, k, h, changedReason(server, name, old, t, canonical))
	}
}

func (s *Store) blockLocked(server, tool, k, h, reason string) Result {
	r := Result{Verdict: Changed, Reason: reason}
	if s.blocked[k] != h {
		s.blocked[k] = h
		r.Transition = true
		metrics.ToolsBlocked.WithLabelValues(server, tool).Inc()
	}
	return r
}

// MaxKeptDefinition is the largest canonical definition a pin keeps for
// `airlock manifests pin` to diff against; a larger one (a UI resource of
// megabytes, say) is pinned by its hash alone, so that an upstream cannot
// grow the pins file, which every process re-reads when it changes,
// without bound.
const MaxKeptDefinition = 1 << 20

func kept(canonical []byte) json.RawMessage {
	if len(canonical) > MaxKeptDefinition {
		return nil
	}
	return canonical
}

func setPin(m map[string]map[string]Pin, server, tool string, p Pin) {
	if m[server] == nil {
		m[server] = map[string]Pin{}
	}
	m[server][tool] = p
}

// changedReason names what changed (by field, never by content) and how to
// accept it.
func changedReason(server, tool string, old Pin, t *mcp.Tool, canonical []byte) string {
	since := ""
	if !old.PinnedAt.IsZero() {
		since = " on " + old.PinnedAt.UTC().Format(time.DateOnly)
	}
	if Legacy(old, t) {
		return fmt.Sprintf("blocked: tool %s of upstream %s now has icons or _meta that its pin%s does not cover (the upstream added them since, or the pin was made by an airlock that did not pin these fields); the rest of its definition is unchanged; review them and pin the tool again with: airlock manifests pin %s %s",
			tool, server, since, server, tool)
	}
	if IsUIResource(tool) {
		return fmt.Sprintf("blocked: upstream %s changed UI resource %s since it was pinned%s (its contents changed); review the change and accept it with: airlock manifests pin %s %s",
			server, tool, since, server, tool)
	}
	what := "its definition changed"
	if fields := ChangedFields(old.Definition, canonical); len(fields) > 0 {
		what = "changed: " + strings.Join(fields, ", ")
	}
	return fmt.Sprintf("blocked: upstream %s changed tool %s since it was pinned%s (%s); review the change and accept it with: airlock manifests pin %s %s",
		server, tool, since, what, server, tool)
}

// ChangedFields lists the top-level fields (of Fields) whose canonical JSON
// differs between two canonical definitions; nil if either cannot be read.
func ChangedFields(oldDef, newDef []byte) []string {
	var a, b map[string]json.RawMessage
	if len(oldDef) == 0 || json.Unmarshal(oldDef, &a) != nil || json.Unmarshal(newDef, &b) != nil {
		return nil
	}
	var out []string
	for _, f := range Fields {
		if !jsonEqual(a[f], b[f]) {
			out = append(out, f)
		}
	}
	return out
}

func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	ea, _ := encode(x)
	eb, _ := encode(y)
	return bytes.Equal(ea, eb)
}

// Lookup returns the pin of a tool, after re-reading the file if it
// changed.
func (s *Store) Lookup(server, tool string) (Pin, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked()
	p, ok := s.pins[server][tool]
	return p, ok
}

// Pin accepts the current definitions of a server's tools: every tool in
// tools, or only the one named only. It returns the names of the tools
// whose pin was added or replaced, sorted (nil when every pin already
// matched, in which case the file is not written). Pins of tools the
// upstream no longer offers are kept, so a tool that comes back changed is
// still caught.
func (s *Store) Pin(server string, tools []*mcp.Tool, only string) (changed []string, err error) {
	type cand struct {
		pin  Pin
		name string
	}
	now := s.now().UTC().Truncate(time.Second)
	var cands []cand
	var names []string
	for _, t := range tools {
		if t == nil {
			continue
		}
		names = append(names, t.Name)
		if only != "" && t.Name != only {
			continue
		}
		c, err := Canonical(t)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", server, err)
		}
		cands = append(cands, cand{name: t.Name, pin: Pin{SHA256: hashOf(c), Definition: kept(c), PinnedAt: now, By: ByCommand}})
	}
	if only != "" && len(cands) == 0 {
		sort.Strings(names)
		offers := "no tools"
		if len(names) > 0 {
			offers = strings.Join(names, ", ")
		}
		return nil, fmt.Errorf("upstream %s offers no tool named %q (it offers: %s); check the name", server, only, offers)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.reloadLocked()
	if s.diskErr != nil {
		return nil, s.diskErr
	}
	for _, c := range cands {
		if old, ok := s.pins[server][c.name]; !ok || old.SHA256 != c.pin.SHA256 {
			changed = append(changed, c.name)
		}
	}
	sort.Strings(changed)
	if len(changed) == 0 {
		return nil, nil
	}
	accept := map[string]bool{}
	for _, n := range changed {
		accept[n] = true
	}
	err = s.saveLocked(func(m map[string]map[string]Pin) {
		for _, c := range cands {
			if accept[c.name] {
				setPin(m, server, c.name, c.pin)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	for _, n := range changed {
		delete(s.blocked, key(server, n))
	}
	return changed, nil
}

// BlockedError is returned by Verify for a tool whose definition changed
// since it was pinned.
type BlockedError struct {
	Server, Tool string
	Reason       string
}

func (e *BlockedError) Error() string { return e.Reason }

// Verify is the worker's check before it runs a call: it finds tool in
// offered (the upstream's current definitions, e.g. upstream.Pool.Status
// (server).Tools) and returns a *BlockedError if its definition differs from
// its pin, so a gateway with a stale tool list cannot get a blocked tool
// run. A tool missing from offered passes (the call itself reports that the
// upstream has no such tool); a tool without a pin is pinned now, as Check
// does.
func (s *Store) Verify(server, tool string, offered []*mcp.Tool) error {
	for _, t := range offered {
		if t != nil && t.Name == tool {
			if v, why := s.Check(server, t); v == Changed {
				return &BlockedError{Server: server, Tool: tool, Reason: why}
			}
			return nil
		}
	}
	return nil
}
