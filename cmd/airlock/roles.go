package main

import (
	"flag"
	"fmt"
)

// The roles that run separately against a Temporal cluster: gateway and
// worker here, approver in approver.go.

const gatewayLong = `Runs the MCP gateway: agents connect here (http://<listen>/mcp, or stdio with
--stdio); each tools/call becomes an Update on the task's workflow, which a
worker (airlock worker, or airlock dev) executes. Stateless: run as many
replicas as needed.

Prometheus metrics are at http://<listen>/metrics (calls answered by tool and
outcome, refused callers, tasks waiting for approval, the Temporal SDK's),
or on a listener of their own with --metrics-listen (needed with --stdio).
Refused callers are written to the audit stream (--audit-log).`

func gatewayCommand() *Command {
	return &Command{Name: "gateway", Usage: "--temporal-address HOST:PORT [flags]", Short: "run the MCP gateway against a Temporal cluster",
		Long: gatewayLong, NoArgs: true, Flags: bind(gatewayFlags, runGateway)}
}

type gatewayOptions struct {
	common commonFlags
	stdio  bool
	task   string
}

func gatewayFlags(fs *flag.FlagSet, o *gatewayOptions) {
	o.common.register(fs)
	o.common.registerDrain(fs, "requests in flight")
	fs.BoolVar(&o.stdio, "stdio", false, "serve MCP on stdin/stdout (for Claude Desktop) instead of HTTP")
	fs.StringVar(&o.task, "task", "", "with --stdio: attach to this task `ID`")
}

func runGateway(c *Call, o *gatewayOptions) int {
	if code := badDrain(c, o.common.drain); code != 0 {
		return code
	}
	e, code := loadExternal(c, o.common, "only airlock dev runs an embedded Temporal")
	if e == nil {
		return code
	}
	return serve(c, e, roles{gateway: true, stdio: o.stdio}, 0, o.task)
}

const workerLong = `Runs the worker: it polls the task queue and executes AgentTask workflows and
their tool calls against the upstreams named in the manifests.

It serves Prometheus metrics at http://<metrics-listen>/metrics (tool call
attempts and durations, policy decisions, approval waits, compensations,
and the Temporal SDK's own) and writes the audit stream (--audit-log).`

func workerCommand() *Command {
	return &Command{Name: "worker", Usage: "--temporal-address HOST:PORT [flags]", Short: "run the worker (tool calls) against a Temporal cluster",
		Long: workerLong, NoArgs: true, Flags: bind(workerFlags, runWorker)}
}

func workerFlags(fs *flag.FlagSet, f *commonFlags) {
	f.register(fs)
	f.registerDrain(fs, "tool calls in flight (after it, they are cancelled and retried on another worker)")
	f.registerVersioning(fs)
	// The worker has no HTTP listener of its own: /metrics gets one.
	if l := fs.Lookup("metrics-listen"); l != nil {
		l.Usage = "serve Prometheus /metrics at this `address` (\"off\": nowhere)"
		l.DefValue = defaultWorkerMetrics
		_ = l.Value.Set(defaultWorkerMetrics)
	}
}

func runWorker(c *Call, f *commonFlags) int {
	if code := badDrain(c, f.drain); code != 0 {
		return code
	}
	e, code := loadExternal(c, *f, "only airlock dev runs an embedded Temporal")
	if e == nil {
		return code
	}
	if err := checkVersioning(e); err != nil {
		return c.usage("%v", err)
	}
	c.Stdin = nil
	return serve(c, e, roles{worker: true}, 0, "")
}

// loadExternal loads the configuration of a role that runs against a
// Temporal cluster, and refuses without its address; why says what to do
// instead. On failure it has reported why and returns the exit status.
func loadExternal(c *Call, f commonFlags, why string) (*env, int) {
	e, err := load(f, c.Stderr)
	if err != nil {
		return nil, c.fail(err)
	}
	if !e.external {
		return nil, c.fail(fmt.Errorf("no Temporal address: pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS, or temporal.address in %s); %s", e.cfgPath, why))
	}
	return e, 0
}
