package main

import (
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

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	e, err := load(f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "airlock gateway: %v\n", err)
		return 1
	}
	return serve(e, roles{gateway: true, stdio: *stdio}, 0, *task, stdin, stdout, stderr)
}

func runWorker(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("airlock worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f commonFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: airlock worker --temporal-address HOST:PORT [flags]

Runs the worker: it polls the task queue and executes AgentTask workflows and
their tool calls against the upstreams named in the manifests.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	e, err := load(f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "airlock worker: %v\n", err)
		return 1
	}
	return serve(e, roles{worker: true}, 0, "", nil, stdout, stderr)
}
