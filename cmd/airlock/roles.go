package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

func runGateway(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("airlock gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f commonFlags
	f.register(fs)
	stdio := fs.Bool("stdio", false, "serve MCP on stdin/stdout (for Claude Desktop) instead of HTTP")
	task := fs.String("task", "", "with --stdio: attach to this task `ID`")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: airlock gateway --temporal-address HOST:PORT [flags]

Runs the MCP gateway: agents connect here (http://<listen>/mcp, or stdio with
--stdio); each tools/call becomes an Update on the task's workflow, which a
worker (airlock worker, or airlock dev) executes. Stateless: run as many
replicas as needed.

Prometheus metrics are at http://<listen>/metrics (calls answered by tool and
outcome, refused callers, tasks waiting for approval, the Temporal SDK's),
or on a listener of their own with --metrics-listen (needed with --stdio).
Refused callers are written to the audit stream (--audit-log).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "airlock gateway: unexpected argument %q (flags only; see airlock gateway -h)\n", fs.Arg(0))
		return 2
	}
	e, err := load(f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "airlock gateway: %v\n", err)
		return 1
	}
	if !e.external {
		fmt.Fprintf(stderr, "airlock gateway: no Temporal address: pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS, or temporal.address in %s); only airlock dev runs an embedded Temporal\n", e.cfgPath)
		return 1
	}
	return serve(e, roles{gateway: true, stdio: *stdio}, 0, *task, stdin, stdout, stderr)
}

func runWorker(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("airlock worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f commonFlags
	f.register(fs)
	// The worker has no HTTP listener of its own: /metrics gets one.
	if l := fs.Lookup("metrics-listen"); l != nil {
		l.Usage = "serve Prometheus /metrics at this `address` (\"off\": nowhere)"
		l.DefValue = defaultWorkerMetrics
		_ = l.Value.Set(defaultWorkerMetrics)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: airlock worker --temporal-address HOST:PORT [flags]

Runs the worker: it polls the task queue and executes AgentTask workflows and
their tool calls against the upstreams named in the manifests.

It serves Prometheus metrics at http://<metrics-listen>/metrics (tool call
attempts and durations, policy decisions, approval waits, compensations,
and the Temporal SDK's own) and writes the audit stream (--audit-log).

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "airlock worker: unexpected argument %q (flags only; see airlock worker -h)\n", fs.Arg(0))
		return 2
	}
	e, err := load(f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "airlock worker: %v\n", err)
		return 1
	}
	if !e.external {
		fmt.Fprintf(stderr, "airlock worker: no Temporal address: pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS, or temporal.address in %s); only airlock dev runs an embedded Temporal\n", e.cfgPath)
		return 1
	}
	return serve(e, roles{worker: true}, 0, "", nil, stdout, stderr)
}

// parseExit is the exit code for a flag parsing error: 0 when help was
// asked for (-h, --help), 2 for a usage error (the flag package has already
// printed what is wrong and the usage).
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}
