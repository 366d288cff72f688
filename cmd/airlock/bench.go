package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-run/airlock/internal/devserver"
	"github.com/airlock-run/airlock/internal/loadgen"
	"github.com/airlock-run/airlock/internal/upstream"
)

const benchLong = `Puts load on an MCP endpoint (airlock, or any streamable HTTP MCP server):
--sessions concurrent sessions, each its own MCP session (through airlock,
its own task), call --tool with --args back to back for --duration or
--calls per target, after --warmup calls per session that are not counted.
It prints calls per second, p50/p95/p99/max latency of the answered calls,
and errors: transport errors (no result: HTTP, protocol, past --timeout)
apart from isError results, with the first messages.

With --direct it measures the upstream's own endpoint too, in the same run,
and prints the two side by side with their ratio: what going through airlock
costs. The two are measured alternately, in --rounds rounds (direct, then
airlock, in each), every session held open throughout, so a change in the
machine's load falls on both; --duration and --calls are per target.

With --floor it also measures the bare Temporal floor, in the same rounds:
what any durable call costs on this machine with no airlock code on the
path. bench starts an embedded Temporal server of its own (SQLite in a
temporary directory, removed at the end) and an SDK worker in its own
process, and each floor call is one Temporal Update on a workflow per
session whose handler runs one local activity returning its input: the
shape of airlock's fast path (an auto-allowed call: one Update, one local
activity). It prints the floor beside the call and airlock's own share:
p50/p95/p99 through airlock minus the floor's, the same minus the
upstream's own p50 when --direct is given, and airlock's calls per second
as a fraction of the floor's. The floor runs in the bench process, not in
airlock's: it shares the machine, not airlock's caches.

The key sent to --url (Authorization: Bearer) is read from --key-file, else
env AIRLOCK_API_KEY; none is sent when neither is set. A run is bounded:
at most 1,000,000 calls and 1h per target. Ctrl-C stops it and prints what
was measured.

Exit status: 0 when every measured call was answered without isError, 1 when
any failed, the run was interrupted or could not start, 2 for a bad flag.`

func benchCommand() *Command {
	return &Command{Name: "bench", Usage: `--tool NAME [--url URL] [--args JSON] [--sessions N] [--duration D | --calls N] [flags]
--tool NAME [--direct URL [--direct-tool NAME]] [--floor] [flags]`,
		Short: "put N sessions of load on a tool; with --direct and --floor, compare with the upstream called directly and the bare Temporal floor",
		Long:  benchLong, NoArgs: true, Flags: bind(benchFlags, runBench)}
}

type benchOptions struct {
	url, keyFile, tool, args string
	direct, directTool       string
	sessions, calls, warmup  int
	rounds                   int
	duration, timeout        time.Duration
	idempotencyKeys, asJSON  bool
	floor                    bool
}

func benchFlags(fs *flag.FlagSet, o *benchOptions) {
	fs.StringVar(&o.url, "url", "http://127.0.0.1:7400/mcp", "the MCP `URL` to load (airlock's /mcp)")
	fs.StringVar(&o.keyFile, "key-file", "", "read the API key sent to --url from this `file` (default: env "+envAPIKey+")")
	fs.StringVar(&o.tool, "tool", "", "the `tool` to call, as --url names it (through airlock: <server>__<tool>)")
	fs.StringVar(&o.args, "args", "{}", "the tool's arguments, a `JSON` object, the same for every call")
	fs.IntVar(&o.sessions, "sessions", 1, "`N` concurrent sessions per target, each calling back to back")
	fs.DurationVar(&o.duration, "duration", 0, "measure each target for `D` (at most 1h; default 10s unless --calls is given)")
	fs.IntVar(&o.calls, "calls", 0, "measure each target over `N` calls (at most 1000000)")
	fs.IntVar(&o.warmup, "warmup", 1, "`N` calls per session before measuring, not counted; one that fails stops the run")
	fs.BoolVar(&o.idempotencyKeys, "idempotency-keys", false, `send each call a unique _meta["`+upstream.MetaIdempotencyKey+`"]`)
	fs.StringVar(&o.direct, "direct", "", "also measure the upstream's streamable HTTP `URL` directly, for the ratio")
	fs.StringVar(&o.directTool, "direct-tool", "", "the tool's `NAME` on --direct (default: --tool after its SERVER__ prefix)")
	fs.BoolVar(&o.floor, "floor", false, "also measure the bare Temporal floor (an Update running one local activity on an embedded server of bench's own) and print airlock's share over it")
	fs.IntVar(&o.rounds, "rounds", 0, "alternate the targets in `N` rounds (default 5 with --direct or --floor)")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "bound one call to `D`; a call past it is a transport error")
	fs.BoolVar(&o.asJSON, "json", false, "print the results as JSON")
}

// benchReport is the --json output.
type benchReport struct {
	Tool            string          `json:"tool"`
	Args            json.RawMessage `json:"args"`
	Sessions        int             `json:"sessions"`
	DurationSeconds float64         `json:"duration_s,omitempty"`
	Calls           int             `json:"calls,omitempty"`
	Warmup          int             `json:"warmup"`
	Rounds          int             `json:"rounds"`
	IdempotencyKeys bool            `json:"idempotency_keys"`
	Airlock         *loadgen.Result `json:"airlock"`
	Direct          *loadgen.Result `json:"direct,omitempty"`
	// Floor is the bare Temporal floor (with --floor).
	Floor *loadgen.Result `json:"floor,omitempty"`
	// Ratio is airlock against direct (with --direct).
	Ratio *loadgen.Ratio `json:"ratio,omitempty"`
	// Share is airlock's own share over the floor (with --floor).
	Share       *loadgen.Share `json:"share,omitempty"`
	Interrupted bool           `json:"interrupted,omitempty"`
	CPUs        int            `json:"cpus"`
	// LoadAverage is the 1-minute load average at the end ("" where the
	// system does not say).
	LoadAverage string `json:"load_average,omitempty"`
}

func runBench(c *Call, o *benchOptions) int {
	if o.tool == "" {
		return c.usage("--tool is required: the tool to call, e.g. --tool counter__echo")
	}
	if o.duration == 0 && o.calls == 0 {
		o.duration = 10 * time.Second
	}
	if o.rounds == 0 {
		o.rounds = 1
		if o.direct != "" || o.floor {
			o.rounds = 5
		}
	}
	if o.directTool == "" {
		o.directTool = o.tool
		if _, after, ok := strings.Cut(o.tool, "__"); ok {
			o.directTool = after
		}
	}
	h := http.Header{}
	if key, err := benchKey(o.keyFile); err != nil {
		return c.usage("%v", err)
	} else if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	// In each round: direct, the floor, airlock (last: rs[len(rs)-1]).
	var targets []loadgen.Target
	if o.direct != "" {
		targets = append(targets, loadgen.Target{Name: "direct", URL: o.direct, Tool: o.directTool})
	}
	var fl floorTarget
	if o.floor {
		targets = append(targets, loadgen.Target{Name: "floor", URL: "embedded Temporal", Tool: "Update + local activity", Open: fl.open})
	}
	targets = append(targets, loadgen.Target{Name: "airlock", URL: o.url, Tool: o.tool, Header: h})
	opts := loadgen.Options{Args: json.RawMessage(o.args), Sessions: o.sessions, Duration: o.duration, Calls: o.calls,
		Warmup: o.warmup, Rounds: o.rounds, CallTimeout: o.timeout}
	if o.idempotencyKeys {
		opts.IdempotencyKeyMeta = upstream.MetaIdempotencyKey
	}

	if err := loadgen.Check(targets, opts); err != nil {
		return c.usage("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills
	fmt.Fprintf(c.Stderr, "%s: %s\n", c.Name, describe(o))
	if o.floor {
		fmt.Fprintf(c.Stderr, "%s: starting the floor's embedded Temporal\n", c.Name)
	}
	defer fl.close()
	b, err := loadgen.Open(ctx, targets, opts)
	if err != nil {
		if ctx.Err() != nil {
			return c.fail(errors.New("interrupted before measuring"))
		}
		return c.fail(err)
	}
	defer b.Close()
	rs := b.Run(ctx)

	rep := benchReport{Tool: o.tool, Args: opts.Args, Sessions: o.sessions, DurationSeconds: o.duration.Seconds(), Calls: o.calls,
		Warmup: o.warmup, Rounds: o.rounds, IdempotencyKeys: o.idempotencyKeys, Interrupted: ctx.Err() != nil,
		CPUs: runtime.NumCPU(), LoadAverage: loadAverage()}
	rep.Airlock = rs[len(rs)-1]
	if o.direct != "" {
		rep.Direct = rs[0]
		q := loadgen.Compare(rep.Direct, rep.Airlock)
		rep.Ratio = &q
	}
	if o.floor {
		rep.Floor = rs[len(rs)-2]
		sh := loadgen.ShareOf(rep.Direct, rep.Floor, rep.Airlock)
		rep.Share = &sh
	}
	if o.asJSON {
		printJSON(c.Stdout, rep)
	} else {
		loadgen.WriteTable(c.Stdout, rs)
		if rep.Direct != nil {
			fmt.Fprintln(c.Stdout)
			loadgen.WriteRatio(c.Stdout, rep.Direct, rep.Airlock)
		}
		if rep.Floor != nil {
			fmt.Fprintln(c.Stdout)
			loadgen.WriteShare(c.Stdout, rep.Direct, rep.Floor, rep.Airlock)
		}
		fmt.Fprintf(c.Stdout, "\n%d CPUs", rep.CPUs)
		if rep.LoadAverage != "" {
			fmt.Fprintf(c.Stdout, ", load average %s at the end", rep.LoadAverage)
		}
		fmt.Fprintln(c.Stdout)
	}
	failed := false
	for _, r := range rs {
		failed = failed || r.Errs() > 0
	}
	switch {
	case rep.Interrupted:
		fmt.Fprintf(c.Stderr, "%s: interrupted: the figures are for what was measured before\n", c.Name)
		return 1
	case failed:
		return 1
	}
	return 0
}

// describe is the line that says what the run will do.
func describe(o *benchOptions) string {
	bound := o.duration.String()
	switch {
	case o.calls > 0 && o.duration > 0:
		bound = fmt.Sprintf("%d calls or %s", o.calls, o.duration)
	case o.calls > 0:
		bound = fmt.Sprintf("%d calls", o.calls)
	}
	sessions := "1 session"
	if o.sessions != 1 {
		sessions = fmt.Sprintf("%d sessions", o.sessions)
	}
	s := fmt.Sprintf("%s on %s, %s, %s", o.tool, o.url, sessions, bound)
	if o.direct != "" {
		s += fmt.Sprintf(" per target; direct: %s on %s", o.directTool, o.direct)
	}
	if o.floor {
		s += "; floor: an Update running one local activity on an embedded Temporal"
	}
	if o.direct != "" || o.floor {
		s += fmt.Sprintf("; alternating in %d rounds", o.rounds)
	}
	return s + " (Ctrl-C stops and prints what was measured)"
}

// benchKey is the API key to send: from keyFile, else AIRLOCK_API_KEY, else
// none (an endpoint without keys). Keys never come from a flag: flags show
// in ps and shell history.
func benchKey(keyFile string) (string, error) {
	if keyFile == "" {
		return strings.TrimSpace(os.Getenv(envAPIKey)), nil
	}
	key, _, err := readAPIKey(keyFile)
	return key, err
}

// loadAverage is the 1-minute load average, where /proc says it.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// floorTarget starts the floor (devserver.Floor) when loadgen opens its
// sessions, and stops it at the end.
type floorTarget struct{ f *devserver.Floor }

func (ft *floorTarget) open(ctx context.Context, n int) ([]loadgen.Caller, error) {
	f, err := devserver.StartFloor(ctx)
	if err != nil {
		return nil, err
	}
	ft.f = f
	ss, err := f.Open(ctx, n)
	if err != nil {
		return nil, err
	}
	out := make([]loadgen.Caller, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out, nil
}

func (ft *floorTarget) close() {
	if ft.f != nil {
		ft.f.Close()
	}
}
