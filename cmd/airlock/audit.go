package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/signkey"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/wasm/program/wire"
	"github.com/airlock-run/airlock/worker"
	"github.com/airlock-run/airlock/workflows"
)

const auditRedactNote = `Arguments are masked at the redact paths of the tools' manifests (from
--config; the default airlock.yaml is read when present) and at those
recorded with approval requests; _meta and credential-named members are
removed wherever they are.`

func auditCommand() *Command {
	return &Command{Name: "audit", Short: "a task's timeline; a hash-chained export; replay checks",
		Long: auditRedactNote + "\n\n" + talksToDev,
		Sub: []*Command{
			{Name: "show", Usage: "[--json] [--run RUN_ID] [--config FILE] [--ui-url URL] TASK_ID",
				Short: "the task's timeline from its recorded history, all its runs", Long: auditShowLong, Flags: bind(auditFlags, auditShow)},
			{Name: "export", Usage: "[--task TASK_ID | --since TIME] [--format airlock|sep-3004] [--out FILE] [--config FILE]",
				Short: "JSON lines for a SIEM, one record per event, chained by SHA-256", Long: auditExportLong, Flags: bind(auditFlags, auditExport)},
			{Name: "verify", Usage: "TASK_ID | FILE [--public-key FILE]\n--history HISTORY.json",
				Short: "check an export's chain and receipts, or replay a task's history", Long: auditVerifyLong, Flags: bind(auditFlags, auditVerify)},
			{Name: "keygen", Usage: "--out FILE", NoArgs: true,
				Short: "write an Ed25519 key pair that signs sep-3004 exports", Long: auditKeygenLong, Flags: bind(keygenFlags, auditKeygen)},
		}}
}

const auditShowLong = `Shows the task's timeline from its recorded history, all its runs: who asked
for what, the policy decision and its rule, who approved and when, each
result, compensations and rollbacks; each program (code mode) with its
source and its calls under it, each at its line. --json prints the timeline as JSON;
--run shows one run only.

` + auditRedactNote + "\n\n" + talksToDev

const auditExportLong = `Exports JSON lines for a SIEM, one record per event, oldest first, chained by
SHA-256 (each record's prev is the hash of the line before it, its hash
covers the record). --task exports one task; --since the tasks with a run
started after TIME (RFC 3339, a date such as 2026-11-29, or a duration back
from now such as 24h), each whole; neither exports every task.

--format sep-3004 writes the records of the SEP-3004 draft ("Tamper-Evident
Audit Record Contract", 2026-06-02): canonical JSON (RFC 8785), each
record's previous_hash the event_hash of the one before, the outcome enum
(allowed, denied, deferred, error), airlock's fields as the "airlock"
extension, and a last record, the seal, that counts them. With
audit.signing_key_file in the configuration every record carries a
receipt: an Ed25519 signature of its canonical bytes (airlock audit keygen
makes the key; verify --public-key checks them).

` + auditRedactNote + "\n\n" + talksToDev

const auditKeygenLong = `Writes a new Ed25519 key pair: FILE, the private key (PEM, PKCS #8, mode
0600), and FILE.pub, the public key (PEM, PKIX). Name FILE in the
configuration's audit.signing_key_file so that export --format sep-3004
signs its records; give FILE.pub to whoever verifies them (airlock audit
verify --public-key FILE.pub), which needs nothing else. An existing file is
never overwritten.`

const auditVerifyLong = `FILE (an argument naming an existing file): checks an export's chain;
reports the first broken record. A sep-3004 export is checked record by
record (core fields, values, event_hash, previous_hash) and must end with
its seal; --public-key FILE also requires every record to be signed by that
key, and checks each signature, offline.
TASK_ID: replays every run of the task against this binary's workflow code;
a failure means the workflow code changed without workflow.GetVersion, or
the history was altered.
--history: replays one history JSON file (as the Temporal CLI or UI
downloads it) the same way.
A history that runs programs (code mode) replays by running them again with
the program runner this binary was built with; without one, verify says so.

` + talksToDev

// envUIURL is where the Temporal Web UI is, for show's link.
const envUIURL = "AIRLOCK_UI_URL"

// auditOptions are the flags of every audit subcommand.
type auditOptions struct {
	conn    temporalFlags
	asJSON  bool
	runID   string
	config  string
	uiURL   string
	task    string
	since   string
	out     string
	history string
	format  string
	pubKey  string
}

func auditFlags(fs *flag.FlagSet, o *auditOptions) {
	o.conn.register(fs)
	fs.BoolVar(&o.asJSON, "json", false, "show: print the timeline as JSON")
	fs.StringVar(&o.runID, "run", "", "show: only this `run` of the task")
	fs.StringVar(&o.config, "config", defaultConfig, "configuration `file` whose manifests give the redact paths (\"\" for none)")
	fs.StringVar(&o.uiURL, "ui-url", os.Getenv(envUIURL), "show: the Temporal Web UI's base `URL` for the link (env "+envUIURL+"; default: the config's temporal.ui_url, else the UI airlock dev serves, else no link)")
	fs.StringVar(&o.task, "task", "", "export: only this `task`")
	fs.StringVar(&o.since, "since", "", "export: tasks with a run started after `TIME`")
	fs.StringVar(&o.out, "out", "", "export: write to this `file` (default: standard output)")
	fs.StringVar(&o.history, "history", "", "verify: replay this history JSON `file`")
	fs.StringVar(&o.format, "format", formatAirlock, "export: "+formatAirlock+" (the default records) or "+formatSEP3004+" (the SEP-3004 draft's, signed when audit.signing_key_file is set)")
	fs.StringVar(&o.pubKey, "public-key", "", "verify: check a sep-3004 export's receipts with this Ed25519 public key `file` (PEM)")
}

// auditTimeout bounds an audit command that talks to Temporal.
const auditTimeout = 10 * time.Minute

// timelineOptions are the redact paths of the configuration's manifests
// (nil after reporting why they cannot be read).
func (o *auditOptions) timelineOptions(c *Call) *timeline.Options {
	redact, err := loadRedact(o.config)
	if err != nil {
		c.fail(fmt.Errorf("%v\n(the redact paths come from the manifests; fix the configuration, or pass --config \"\" to mask only what the history records)", err))
		return nil
	}
	return &timeline.Options{Redact: redact}
}

func auditShow(c *Call, o *auditOptions) int {
	if len(c.Args) != 1 {
		return c.usage("name one TASK_ID (airlock tasks list shows them)")
	}
	opts := o.timelineOptions(c)
	if opts == nil {
		return 1
	}
	id := c.Args[0]
	return o.conn.run(c, auditTimeout, func(ctx context.Context, tc client.Client) int {
		hists, err := fetchTask(ctx, tc, id, o.runID)
		if err != nil {
			return c.failOn(id, explainFetch(err, id, o.conn.namespace))
		}
		tl, err := timeline.BuildChain(hists, opts)
		if err != nil {
			return c.failOn(id, err)
		}
		// Grants across the principal's tasks are revoked in the
		// principal's grants workflow: show those the task made. No such
		// workflow (the principal never had one): nothing to add.
		if tl.Principal != "" {
			if ph, err := timeline.FetchRuns(ctx, tc, api.PrincipalGrantsID(tl.Principal), ""); err == nil {
				timeline.AddPrincipalRevocations(tl, ph)
			}
		}
		if o.asJSON {
			printJSON(c.Stdout, tl)
			return 0
		}
		devDir, _ := runningDev(ctx, tc, o.conn.namespace)
		if err := timeline.Render(c.Stdout, tl, &timeline.RenderOptions{UIURL: o.linkURL(c, devDir), Namespace: o.conn.namespace}); err != nil {
			return c.failOn(id, err)
		}
		return 0
	})
}

func auditExport(c *Call, o *auditOptions) int {
	if len(c.Args) > 0 {
		return c.usage("unexpected argument %q (one task: --task %s)", c.Args[0], c.Args[0])
	}
	if o.task != "" && o.since != "" {
		return c.usage("--task and --since do not go together; give one")
	}
	var since time.Time
	if o.since != "" {
		t, err := parseSince(o.since, time.Now())
		if err != nil {
			return c.usage("%v", err)
		}
		since = t
	}
	if o.format != formatAirlock && o.format != formatSEP3004 {
		return c.usage("--format %q: use %s (the default) or %s", o.format, formatAirlock, formatSEP3004)
	}
	opts := o.timelineOptions(c)
	if opts == nil {
		return 1
	}
	var key ed25519.PrivateKey
	if o.format == formatSEP3004 {
		var err error
		if key, err = loadSigningKey(o.config); err != nil {
			return c.fail(err)
		}
	}
	return o.conn.run(c, auditTimeout, func(ctx context.Context, tc client.Client) int {
		return exportTasks(ctx, c, tc, o, since, opts, key)
	})
}

func auditVerify(c *Call, o *auditOptions) int {
	if o.pubKey != "" && o.history != "" {
		return c.usage("--public-key checks a sep-3004 export's receipts; it does not go with --history")
	}
	if o.history != "" {
		if len(c.Args) > 0 {
			return c.usage("--history takes the file; unexpected argument %q", c.Args[0])
		}
		return verifyHistoryFile(c, o.history)
	}
	if len(c.Args) != 1 {
		return c.usage("name one TASK_ID or export FILE")
	}
	if st, err := os.Stat(c.Args[0]); err == nil && st.Mode().IsRegular() {
		return verifyFile(c, c.Args[0], o.pubKey)
	}
	if o.pubKey != "" {
		return c.usage("--public-key checks a sep-3004 export FILE; %s is not a file", c.Args[0])
	}
	return o.conn.run(c, auditTimeout, func(ctx context.Context, tc client.Client) int {
		return replayTask(ctx, c, tc, o.conn.namespace, c.Args[0])
	})
}

// parseSince reads --since: RFC 3339, a date (midnight UTC) or a duration
// back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: use RFC 3339 (2026-11-29T10:00:00Z), a date (2026-11-29) or a duration back from now (24h)", s)
}

// loadRedact reads the manifests' redact paths, by exposed tool name. A
// missing default configuration is no error: there are then no paths
// beyond those the history records.
func loadRedact(path string) (map[string][]string, error) {
	if path == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		if path == defaultConfig {
			return nil, nil
		}
		return nil, configMissing(path, abs)
	}
	snap, err := config.Load(abs)
	if err != nil {
		return nil, err
	}
	redact := map[string][]string{}
	for _, m := range snap.Manifests {
		for name, t := range m.Tools {
			if t != nil && len(t.Redact) > 0 {
				redact[m.Exposed(name)] = t.Redact
			}
		}
	}
	return redact, nil
}

// linkURL is the Web UI that show links to: --ui-url or AIRLOCK_UI_URL
// when set, else the configuration's temporal.ui_url, else the UI that the
// airlock dev serving this Temporal recorded in its data dir (devDir, else
// the configuration's data dir);
// "" (no link) when none is known, rather than a port that may serve
// nothing.
func (o *auditOptions) linkURL(c *Call, devDir string) string {
	_, env := os.LookupEnv(envUIURL)
	return o.showLink(env || c.given("ui-url"), devDir)
}

// showLink: devDir is the data dir of the airlock dev whose Temporal the
// command talks to ("": none), which says where its UI is better than the
// configuration's data_dir (the dev may run with --data-dir).
func (o *auditOptions) showLink(asked bool, devDir string) string {
	if asked {
		return o.uiURL
	}
	dataDir := ".airlock"
	if o.config != "" {
		if abs, err := filepath.Abs(o.config); err == nil {
			if snap, err := config.Load(abs); err == nil {
				if snap.Config.Temporal.UIURL != "" {
					return snap.Config.Temporal.UIURL
				}
				dataDir = firstNonEmpty(snap.Config.DataDir, dataDir)
			}
		}
	}
	url, _ := readServedUI(firstNonEmpty(devDir, dataDir), o.conn.address)
	return url
}

// fetchTask is every run of a task, or the one run asked for.
func fetchTask(ctx context.Context, c client.Client, id, runID string) ([]*historypb.History, error) {
	if runID != "" {
		h, err := timeline.FetchRun(ctx, c, id, runID)
		if err != nil {
			return nil, err
		}
		return []*historypb.History{h}, nil
	}
	return timeline.FetchRuns(ctx, c, id, "")
}

func explainFetch(err error, id, namespace string) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("no task %s in namespace %s (airlock tasks list shows them): %w", id, namespace, err)
	}
	return err
}

// exportRef is one task to export: run is the last run of its chain (""
// for the latest), first and last the start times of its runs.
type exportRef struct {
	id, run     string
	first, last time.Time
}

// Export formats.
const (
	formatAirlock = "airlock"
	formatSEP3004 = "sep-3004"
)

// chainWriter is an export format's writer of records.
type chainWriter interface {
	Write(*timeline.Timeline) error
	Records() int64
	Last() string
}

// loadSigningKey is the configuration's audit.signing_key_file (nil when
// unset, or when the default configuration is absent).
func loadSigningKey(path string) (ed25519.PrivateKey, error) {
	if path == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) && path == defaultConfig {
		return nil, nil
	}
	snap, err := config.Load(abs)
	if err != nil {
		return nil, err
	}
	return snap.Config.AuditSigningKey()
}

// exportTasks writes the chain of one task, or of every task with a run
// started after since, oldest first; key signs sep-3004 records.
func exportTasks(ctx context.Context, c *Call, tc client.Client, o *auditOptions, since time.Time, opts *timeline.Options, key ed25519.PrivateKey) int {
	refs := []exportRef{{id: o.task}}
	if o.task == "" {
		var err error
		if refs, err = exportRefs(ctx, tc, o.conn.namespace, o.since != "", since); err != nil {
			return c.fail(fmt.Errorf("listing tasks: %w", err))
		}
	}
	// Build every timeline before writing, so a failure leaves no half
	// file behind.
	var buf bytes.Buffer
	var x chainWriter = timeline.NewExporter(&buf)
	sep := timeline.NewSEP3004Exporter(&buf, key)
	if o.format == formatSEP3004 {
		x = sep
	}
	for _, r := range refs {
		hists, err := timeline.FetchRuns(ctx, tc, r.id, r.run)
		if err != nil {
			return c.fail(fmt.Errorf("task %s: %w", r.id, explainFetch(err, r.id, o.conn.namespace)))
		}
		tl, err := timeline.BuildChain(hists, opts)
		if err == nil {
			err = x.Write(tl)
		}
		if err != nil {
			return c.fail(fmt.Errorf("task %s: %w", r.id, err))
		}
	}
	what := ""
	if o.format == formatSEP3004 {
		if err := sep.Seal(time.Now()); err != nil {
			return c.fail(err)
		}
		what = " in SEP-3004 records with a seal, unsigned (set audit.signing_key_file to sign them)"
		if key != nil {
			what = " in SEP-3004 records with a seal, each signed by key " + signkey.KeyID(key.Public().(ed25519.PublicKey))
		}
	}
	dest := "standard output"
	if o.out == "" || o.out == "-" {
		if _, err := c.Stdout.Write(buf.Bytes()); err != nil {
			return c.fail(err)
		}
	} else {
		if err := os.WriteFile(o.out, buf.Bytes(), 0o600); err != nil {
			return c.fail(err)
		}
		dest = o.out
	}
	fmt.Fprintf(c.Stderr, "exported %d records of %d task(s)%s to %s; last hash %s\n", x.Records(), len(refs), what, dest, x.Last())
	return 0
}

// exportRefs lists every task (with a run started after since, when
// bySince), oldest first.
func exportRefs(ctx context.Context, tc client.Client, namespace string, bySince bool, since time.Time) ([]exportRef, error) {
	q := taskKinds
	if bySince {
		q += " AND StartTime > '" + since.UTC().Format(time.RFC3339Nano) + "'"
	}
	byID := map[string]*exportRef{}
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: q, NextPageToken: token})
		if err != nil {
			return nil, err
		}
		for _, ex := range resp.GetExecutions() {
			id, run, start := ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId(), ex.GetStartTime().AsTime()
			r, ok := byID[id]
			if !ok {
				byID[id] = &exportRef{id: id, run: run, first: start, last: start}
				continue
			}
			if start.Before(r.first) {
				r.first = start
			}
			if start.After(r.last) {
				r.run, r.last = run, start
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	var refs []exportRef
	for _, r := range byID {
		refs = append(refs, *r)
	}
	sort.Slice(refs, func(i, j int) bool {
		if !refs[i].first.Equal(refs[j].first) {
			return refs[i].first.Before(refs[j].first)
		}
		return refs[i].id < refs[j].id
	})
	return refs, nil
}

// verifyFile checks an export's chain; pubKey ("": none) checks a
// sep-3004 export's receipts.
func verifyFile(c *Call, path, pubKey string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return c.fail(err)
	}
	if timeline.IsSEP3004(b) {
		return verifySEP3004(c, path, b, pubKey)
	}
	if pubKey != "" {
		return c.fail(fmt.Errorf("%s is not a sep-3004 export, and only those carry receipts for --public-key to check (export with --format sep-3004)", path))
	}
	if looksLikeHistory(b) {
		return verifyHistory(c, path, b)
	}
	res, err := timeline.Verify(bytes.NewReader(b))
	if err != nil {
		return c.failOn(path, fmt.Errorf("BROKEN at %v", err))
	}
	fmt.Fprintf(c.Stdout, "OK: %s: %d records, the chain is intact; last hash %s\n", path, res.Records, res.Last)
	return 0
}

func verifySEP3004(c *Call, path string, b []byte, pubKey string) int {
	var pub ed25519.PublicKey
	if pubKey != "" {
		var err error
		if pub, err = signkey.ReadPublic(pubKey); err != nil {
			return c.fail(fmt.Errorf("--public-key: %w", err))
		}
	}
	res, err := timeline.VerifySEP3004(bytes.NewReader(b), pub)
	if err != nil {
		return c.failOn(path, fmt.Errorf("BROKEN at %v", err))
	}
	for _, u := range res.Unprotected {
		fmt.Fprintf(c.Stderr, "note: %s is a member no hash or signature covers (ignored)\n", u)
	}
	sig := "unsigned (a chain anyone who can rewrite the file can recompute: keep the seal's hash elsewhere, or sign exports with audit.signing_key_file)"
	switch {
	case res.SignaturesChecked:
		sig = "every record signed by key " + res.KeyID + ", the signatures verify"
	case res.Signed:
		sig = "signed by key " + res.KeyID + "; signatures NOT checked: give --public-key"
	}
	fmt.Fprintf(c.Stdout, "OK: %s: %d records and the seal, %s; the chain is intact; %s; seal hash %s\n",
		path, res.Records, timeline.SEP3004Revision, sig, res.Seal)
	return 0
}

func keygenFlags(fs *flag.FlagSet, o *auditOptions) {
	fs.StringVar(&o.out, "out", "", "the private key's `file` (the public key goes to FILE.pub)")
}

func auditKeygen(c *Call, o *auditOptions) int {
	if o.out == "" || o.out == "-" {
		return c.usage("--out FILE names the private key's file (the public key goes to FILE.pub)")
	}
	pub, err := signkey.Generate(o.out, o.out+".pub")
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.Stdout, "wrote %s (private, mode 0600) and %s.pub\nkey id %s\nsign exports: audit.signing_key_file: %s in the configuration\nverify them: airlock audit verify --public-key %s.pub FILE\n",
		o.out, o.out, signkey.KeyID(pub), o.out, o.out)
	return 0
}

// looksLikeHistory reports that b is a workflow history in JSON (an object
// whose first member is "events") rather than an export.
func looksLikeHistory(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	t, err := dec.Token()
	return err == nil && t == "events"
}

func verifyHistoryFile(c *Call, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return c.fail(err)
	}
	return verifyHistory(c, path, b)
}

// verifyHistory replays a history JSON file against this binary's
// workflows.
func verifyHistory(c *Call, path string, b []byte) int {
	h, err := client.HistoryFromJSON(bytes.NewReader(b), client.HistoryJSONOptions{})
	if err != nil {
		return c.fail(fmt.Errorf("%s is not a workflow history in JSON: %v", path, err))
	}
	if err := replay(h); err != nil {
		return c.fail(fmt.Errorf("%s does NOT replay against this binary's workflow code: %v", path, err))
	}
	fmt.Fprintf(c.Stdout, "OK: %s (%d events) replays against this binary's workflow code\n", path, len(h.GetEvents()))
	return 0
}

// replayTask replays every run of a task.
func replayTask(ctx context.Context, c *Call, tc client.Client, namespace, id string) int {
	hists, err := timeline.FetchRuns(ctx, tc, id, "")
	if err != nil {
		return c.failOn(id, explainFetch(err, id, namespace))
	}
	events := 0
	for i, h := range hists {
		run := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()
		if err := replay(h); err != nil {
			return c.failOn(id, fmt.Errorf("run %d of %d (%s) does NOT replay against this binary's workflow code: %v", i+1, len(hists), run, err))
		}
		events += len(h.GetEvents())
	}
	fmt.Fprintf(c.Stdout, "OK: task %s: %d run(s), %d events, replay against this binary's workflow code\n", id, len(hists), events)
	return 0
}

// programRunner runs the programs (code mode) of the histories audit verify
// replays: a program replays by running again, each of its calls answered
// from history, so the replay needs the interpreter the worker ran it
// with: this binary's (wasm.Program). Tests set it; nil: the first history
// with programs starts one (verifyRunner).
var programRunner workflows.ProgramRunner

// verifyRunner starts the program interpreter for audit verify, once: a
// few seconds of compiling the first time, cached under the user's cache
// dir (like the worker's under its data dir) for the next.
var verifyRunner = sync.OnceValues(func() (workflows.ProgramRunner, error) {
	dir := os.Getenv(envWASMCache)
	if ucd, err := os.UserCacheDir(); dir == "" && err == nil {
		dir = filepath.Join(ucd, "airlock", "wasm-cache")
	}
	rt, err := processPrograms(dir) // programs.go: the process's one
	if err != nil {
		return nil, err
	}
	if err := rt.Ready(context.Background()); err != nil {
		return nil, fmt.Errorf("the program interpreter (wasm.Program) did not compile: %w", err)
	}
	return rt, nil
})

// replay runs one history through the Temporal replayer with airlock's
// workflows registered.
func replay(h *historypb.History) error {
	if progs, n := historyPrograms(h); n > 0 {
		r := programRunner
		if r == nil {
			var err error
			if r, err = verifyRunner(); err != nil {
				what := "1 program"
				if n > 1 {
					what = fmt.Sprintf("%d programs", n)
				}
				return fmt.Errorf("the history runs %s (code mode: %s), and replaying them needs the program interpreter: %v",
					what, strings.Join(progs, ", "), err)
			}
		}
		workflows.UseProgramRunner(r)
	} else if programRunner != nil {
		workflows.UseProgramRunner(programRunner)
	} else {
		// A plan's program steps are not Updates: the interpreter starts
		// when the replay first runs one.
		workflows.UseProgramRunner(lazyRunner{})
	}
	r := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(r)
	return r.ReplayWorkflowHistory(quietLogger{}, h)
}

// lazyRunner starts verifyRunner when a replay first runs a program.
type lazyRunner struct{}

func (lazyRunner) Run(ctx context.Context, req wire.Request, memoryBytes int64, h wire.Host) (wire.Done, error) {
	r, err := verifyRunner()
	if err != nil {
		return wire.Done{}, err
	}
	return r.Run(ctx, req, memoryBytes, h)
}

// historyPrograms are the IDs of the programs a history runs (its
// run_program Updates: the first few), and how many there are.
func historyPrograms(h *historypb.History) ([]string, int) {
	const most = 5
	var ids []string
	n := 0
	for _, ev := range h.GetEvents() {
		if ev.GetEventType() != enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED {
			continue
		}
		req := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest()
		if req.GetInput().GetName() != api.UpdateRunProgram {
			continue
		}
		if n++; n <= most {
			ids = append(ids, req.GetMeta().GetUpdateId())
		}
	}
	if n > most {
		ids = append(ids, fmt.Sprintf("and %d more", n-most))
	}
	return ids, n
}
