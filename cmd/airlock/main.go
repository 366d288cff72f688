// Command airlock is the one binary of airlock: `dev` runs everything in one
// process on an embedded Temporal server; `gateway`, `worker` and
// `approver` run the roles separately against a Temporal cluster; the other
// subcommands are for operators.
package main

import (
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

const usage = `airlock: a durable, human-in-the-loop runtime for AI-agent tool calls.

Usage:
  airlock dev        [flags]   run everything in one process (embedded Temporal on SQLite)
  airlock gateway    [flags]   run the MCP gateway against a Temporal cluster
  airlock worker     [flags]   run the worker (tool calls) against a Temporal cluster
  airlock approver   [flags]   take approvers' Slack clicks (interaction endpoint or Socket Mode)
  airlock run        PLAN.yaml run a plan (declared steps) as a durable task
  airlock tasks      list|show|rollback|cancel|finish
                               inspect, undo, stop agent tasks and plans
  airlock approvals  list|show|approve|deny  decide on calls waiting for approval
  airlock manifests  validate|pin|scan
                               check manifests; accept changed upstream tool
                               definitions; write a manifest skeleton for an upstream
  airlock keys       new|hash  make API keys for principals
  airlock audit      show|export|verify
                               a task's timeline; a hash-chained export; replay checks
  airlock version              print the version

Run "airlock <command> -h" for a command's flags.

Start here:
  go run ./cmd/airlock dev     serves the example configuration (airlock.yaml)
                               at http://127.0.0.1:7400/mcp
`

// run is main without os.Exit, so tests can call it.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "dev":
		return runDev(rest, stdin, stdout, stderr)
	case "gateway":
		return runGateway(rest, stdin, stdout, stderr)
	case "worker":
		return runWorker(rest, stdout, stderr)
	case "tasks":
		return runTasks(rest, stdout, stderr)
	case "run":
		return runRun(rest, stdout, stderr)
	case "approvals":
		return runApprovals(rest, stdout, stderr)
	case "approver":
		return runApprover(rest, stdout, stderr)
	case "manifests":
		return runManifests(rest, stdout, stderr)
	case "keys":
		return runKeys(rest, stdout, stderr)
	case "audit":
		return runAudit(rest, stdout, stderr)
	case "version", "--version":
		fmt.Fprintln(stdout, "airlock", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "airlock: unknown command %q\n\n%s", cmd, usage)
	return 2
}
