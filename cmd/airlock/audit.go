package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/timeline"
	"github.com/airlock-run/airlock/manifests"
	"github.com/airlock-run/airlock/worker"
)

const auditUsage = `Usage:
  airlock audit show [--json] [--run RUN_ID] [--config FILE] [--ui-url URL] TASK_ID
  airlock audit export [--task TASK_ID | --since TIME] [--out FILE] [--config FILE]
  airlock audit verify TASK_ID | FILE
  airlock audit verify --history HISTORY.json

  show    the task's timeline from its recorded history, all its runs: who
          asked for what, the policy decision and its rule, who approved
          and when, each result, compensations and rollbacks. --json prints
          the timeline as JSON; --run shows one run only.
  export  JSON lines for a SIEM, one record per event, oldest first, chained
          by SHA-256 (each record's prev is the hash of the line before it,
          its hash covers the record). --task exports one task; --since the
          tasks with a run started after TIME (RFC 3339, a date such as
          2026-11-29, or a duration back from now such as 24h), each whole;
          neither exports every task.
  verify  FILE (an argument naming an existing file): check an export's
          chain; reports the first broken record.
          TASK_ID: replay every run of the task against this binary's
          workflow code; a failure means the workflow code changed without
          workflow.GetVersion, or the history was altered.
          --history: replay one history JSON file (as the Temporal CLI or
          UI downloads it) the same way.

Arguments are masked at the redact paths of the tools' manifests (from
--config; the default airlock.yaml is read when present) and at those
recorded with approval requests; _meta and credential-named members are
removed wherever they are.

Talks to the Temporal of a running "airlock dev" (127.0.0.1:7233) unless
--temporal-address or TEMPORAL_ADDRESS says otherwise.
`

// envUIURL is where the Temporal Web UI is, for show's link.
const envUIURL = "AIRLOCK_UI_URL"

// defaultUIURL is the Web UI that airlock dev serves.
const defaultUIURL = "http://127.0.0.1:8233"

func runAudit(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, auditUsage)
		return 2
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "-h", "--help", "help":
		fmt.Fprint(stderr, auditUsage)
		return 0
	case "show", "export", "verify":
	default:
		fmt.Fprintf(stderr, "airlock audit: unknown subcommand %q\n%s", sub, auditUsage)
		return 2
	}
	name := "airlock audit " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var tc temporalFlags
	tc.register(fs)
	uiDefault := defaultUIURL
	if v, ok := os.LookupEnv(envUIURL); ok {
		uiDefault = v
	}
	asJSON := fs.Bool("json", false, "show: print the timeline as JSON")
	runID := fs.String("run", "", "show: only this `run` of the task")
	cfgPath := fs.String("config", defaultConfig, "configuration `file` whose manifests give the redact paths (\"\" for none)")
	uiURL := fs.String("ui-url", uiDefault, "show: the Temporal Web UI's base `URL` for the link (env "+envUIURL+"; \"\" for no link)")
	task := fs.String("task", "", "export: only this `task`")
	since := fs.String("since", "", "export: tasks with a run started after `TIME`")
	out := fs.String("out", "", "export: write to this `file` (default: standard output)")
	history := fs.String("history", "", "verify: replay this history JSON `file`")
	fs.Usage = func() { fmt.Fprint(stderr, auditUsage); fs.PrintDefaults() }
	if err := fs.Parse(rest); err != nil {
		return parseExit(err)
	}

	// Arguments first, so that a typo is not reported as a connection
	// problem.
	var sinceT time.Time
	switch sub {
	case "show":
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "%s: name one TASK_ID (airlock tasks list shows them)\n", name)
			return 2
		}
	case "export":
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "%s: unexpected argument %q (one task: --task %s)\n", name, fs.Arg(0), fs.Arg(0))
			return 2
		}
		if *task != "" && *since != "" {
			fmt.Fprintf(stderr, "%s: --task and --since do not go together; give one\n", name)
			return 2
		}
		if *since != "" {
			t, err := parseSince(*since, time.Now())
			if err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", name, err)
				return 2
			}
			sinceT = t
		}
	case "verify":
		if *history != "" {
			if fs.NArg() > 0 {
				fmt.Fprintf(stderr, "%s: --history takes the file; unexpected argument %q\n", name, fs.Arg(0))
				return 2
			}
			return verifyHistoryFile(name, *history, stdout, stderr)
		}
		if fs.NArg() != 1 {
			fmt.Fprintf(stderr, "%s: name one TASK_ID or export FILE\n", name)
			return 2
		}
		if st, err := os.Stat(fs.Arg(0)); err == nil && st.Mode().IsRegular() {
			return verifyFile(name, fs.Arg(0), stdout, stderr)
		}
	}
	var redact map[string][]string
	if sub != "verify" {
		r, err := loadRedact(*cfgPath)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n(the redact paths come from the manifests; fix the configuration, or pass --config \"\" to mask only what the history records)\n", name, err)
			return 1
		}
		redact = r
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, code := tc.dial(ctx, name, stderr)
	if c == nil {
		return code
	}
	defer c.Close()
	opts := &timeline.Options{Redact: redact}

	switch sub {
	case "show":
		id := fs.Arg(0)
		hists, err := fetchTask(ctx, c, id, *runID)
		if err != nil {
			fmt.Fprintf(stderr, "%s %s: %v\n", name, id, explainFetch(err, id, tc.namespace))
			return 1
		}
		tl, err := timeline.BuildChain(hists, opts)
		if err != nil {
			fmt.Fprintf(stderr, "%s %s: %v\n", name, id, err)
			return 1
		}
		if *asJSON {
			printJSON(stdout, tl)
			return 0
		}
		if err := timeline.Render(stdout, tl, &timeline.RenderOptions{UIURL: *uiURL, Namespace: tc.namespace}); err != nil {
			fmt.Fprintf(stderr, "%s %s: %v\n", name, id, err)
			return 1
		}
		return 0
	case "export":
		return exportTasks(ctx, c, name, tc.namespace, *task, *since, sinceT, *out, opts, stdout, stderr)
	default: // verify TASK_ID
		return replayTask(ctx, c, name, tc.namespace, fs.Arg(0), stdout, stderr)
	}
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
				redact[manifests.ExposedName(m.Server.Name, name)] = t.Redact
			}
		}
	}
	return redact, nil
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

// exportTasks writes the chain of one task, or of every task with a run
// started after since, oldest first.
func exportTasks(ctx context.Context, c client.Client, name, namespace, task, sinceFlag string, since time.Time, outPath string,
	opts *timeline.Options, stdout, stderr io.Writer) int {
	type ref struct {
		id, run     string // run: the last run of the chain ("" for the latest)
		first, last time.Time
	}
	var refs []ref
	if task != "" {
		refs = append(refs, ref{id: task})
	} else {
		q := taskKinds
		if sinceFlag != "" {
			q += " AND StartTime > '" + since.UTC().Format(time.RFC3339Nano) + "'"
		}
		byID := map[string]*ref{}
		var token []byte
		for {
			resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: q, NextPageToken: token})
			if err != nil {
				fmt.Fprintf(stderr, "%s: listing tasks: %v\n", name, err)
				return 1
			}
			for _, ex := range resp.GetExecutions() {
				id, run, start := ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId(), ex.GetStartTime().AsTime()
				r, ok := byID[id]
				if !ok {
					byID[id] = &ref{id: id, run: run, first: start, last: start}
					continue
				}
				if start.Before(r.first) {
					r.first = start
				}
				if start.After(r.last) {
					r.run, r.last = run, start
				}
			}
			token = resp.GetNextPageToken()
			if len(token) == 0 {
				break
			}
		}
		for _, r := range byID {
			refs = append(refs, *r)
		}
		sort.Slice(refs, func(i, j int) bool {
			if !refs[i].first.Equal(refs[j].first) {
				return refs[i].first.Before(refs[j].first)
			}
			return refs[i].id < refs[j].id
		})
	}

	// Build every timeline before writing, so a failure leaves no half
	// file behind.
	var buf bytes.Buffer
	x := timeline.NewExporter(&buf)
	for _, r := range refs {
		hists, err := timeline.FetchRuns(ctx, c, r.id, r.run)
		if err != nil {
			fmt.Fprintf(stderr, "%s: task %s: %v\n", name, r.id, explainFetch(err, r.id, namespace))
			return 1
		}
		tl, err := timeline.BuildChain(hists, opts)
		if err == nil {
			err = x.Write(tl)
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: task %s: %v\n", name, r.id, err)
			return 1
		}
	}
	dest := "standard output"
	if outPath == "" || outPath == "-" {
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
	} else {
		if err := os.WriteFile(outPath, buf.Bytes(), 0o600); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		dest = outPath
	}
	fmt.Fprintf(stderr, "exported %d records of %d task(s) to %s; last hash %s\n", x.Records(), len(refs), dest, x.Last())
	return 0
}

// verifyFile checks an export's chain.
func verifyFile(name, path string, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if looksLikeHistory(b) {
		return verifyHistory(name, path, b, stdout, stderr)
	}
	res, err := timeline.Verify(bytes.NewReader(b))
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: BROKEN at %v\n", name, path, err)
		return 1
	}
	fmt.Fprintf(stdout, "OK: %s: %d records, the chain is intact; last hash %s\n", path, res.Records, res.Last)
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

func verifyHistoryFile(name, path string, stdout, stderr io.Writer) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return verifyHistory(name, path, b, stdout, stderr)
}

// verifyHistory replays a history JSON file against this binary's
// workflows.
func verifyHistory(name, path string, b []byte, stdout, stderr io.Writer) int {
	h, err := client.HistoryFromJSON(bytes.NewReader(b), client.HistoryJSONOptions{})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s is not a workflow history in JSON: %v\n", name, path, err)
		return 1
	}
	if err := replay(h); err != nil {
		fmt.Fprintf(stderr, "%s: %s does NOT replay against this binary's workflow code: %v\n", name, path, err)
		return 1
	}
	fmt.Fprintf(stdout, "OK: %s (%d events) replays against this binary's workflow code\n", path, len(h.GetEvents()))
	return 0
}

// replayTask replays every run of a task.
func replayTask(ctx context.Context, c client.Client, name, namespace, id string, stdout, stderr io.Writer) int {
	hists, err := timeline.FetchRuns(ctx, c, id, "")
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", name, id, explainFetch(err, id, namespace))
		return 1
	}
	events := 0
	for i, h := range hists {
		run := h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetOriginalExecutionRunId()
		if err := replay(h); err != nil {
			fmt.Fprintf(stderr, "%s %s: run %d of %d (%s) does NOT replay against this binary's workflow code: %v\n", name, id, i+1, len(hists), run, err)
			return 1
		}
		events += len(h.GetEvents())
	}
	fmt.Fprintf(stdout, "OK: task %s: %d run(s), %d events, replay against this binary's workflow code\n", id, len(hists), events)
	return 0
}

// replay runs one history through the Temporal replayer with airlock's
// workflows registered.
func replay(h *historypb.History) error {
	r := sdkworker.NewWorkflowReplayer()
	worker.RegisterWorkflows(r)
	return r.ReplayWorkflowHistory(quietLogger{}, h)
}
