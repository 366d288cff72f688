package integration

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/devserver"
	"github.com/airlock-run/airlock/internal/testenv"
)

// defaultParallel is -test.parallel for this package unless the command
// line sets it. The tests mostly wait (on servers, timers, processes), so
// more of them than the machine has cores run well side by side; Go's
// default of GOMAXPROCS gives only 2 on a 2-core machine. Every test is
// parallel but four, which run alone first: the one that burns every core
// (TestBudgetHoldsUnderBurst, whose two variants run beside each other), the one
// that reads the process's metrics (TestMetricsAndAuditLog), one that
// calls t.Setenv (TestOAuthNoTokenPassthrough) and one whose burst must fit
// in a 3s window (TestRateLimitBurst).
const defaultParallel = 4

// TestMain raises the parallelism and stops the shared Temporal server
// (see sharedTemporal) after the tests.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		if err := flag.Set("test.parallel", fmt.Sprint(defaultParallel)); err != nil {
			fmt.Fprintln(os.Stderr, "integration: set -test.parallel:", err)
			os.Exit(2)
		}
	}
	// The airlock binaries the tests start run their stdio servers in the
	// sandbox, as a user's airlock dev does: the test upstream's
	// side-effect log is in a directory of its own that its manifest
	// grants (newEffectsLog, effectsSandbox). Under CI=true a host without
	// a sandbox fails the tests that need one (requireSandbox).
	// Every airlock dev the tests start shares one compilation cache (its
	// AIRLOCK_WASM_CACHE): the program interpreter and the wasm tools
	// compile once, not once per process.
	if os.Getenv("AIRLOCK_WASM_CACHE") == "" {
		if dir, err := testenv.WazeroCache(); err == nil {
			_ = os.Setenv("AIRLOCK_WASM_CACHE", dir)
		}
	}
	code := m.Run()
	shared.stop()
	os.Exit(code)
}

// shared is the package's one embedded Temporal server, started by the
// first test that needs it. Each test gets a namespace of its own on it,
// which isolates its workflows, task queues and visibility as a server of
// its own did, for the ~50 ms of registering a namespace instead of the
// seconds of starting a server. Tests that restart or kill their server,
// choose its data dir or options, or run `airlock dev` start their own.
var shared sharedServer

type sharedServer struct {
	once sync.Once
	dir  string
	srv  *devserver.Server
	err  error
	// n numbers the namespaces, so a test that runs twice (-count) or
	// makes two stacks gets a new one each time.
	n atomic.Int64
}

// stop stops the server if a test started it, and removes its data.
func (s *sharedServer) stop() {
	if s.srv != nil {
		if err := s.srv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "integration: stop the shared devserver:", err)
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// temporalNS is a test's Temporal: a server's address and the test's
// namespace on it.
type temporalNS struct{ hostPort, namespace string }

// HostPort is the server's frontend address.
func (n temporalNS) HostPort() string { return n.hostPort }

// Namespace is the test's namespace.
func (n temporalNS) Namespace() string { return n.namespace }

// sharedTemporal creates a fresh namespace for t on the shared server,
// starting the server first if no test has.
func sharedTemporal(t testing.TB) temporalNS {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "airlock-integration-temporal-")
		if shared.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.srv, shared.err = devserver.Start(ctx, devserver.Options{DataDir: shared.dir, SearchAttributes: api.SearchAttributes()})
	})
	if shared.err != nil {
		t.Fatalf("shared devserver: %v", shared.err)
	}
	name := namespaceFor(t.Name(), shared.n.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := shared.srv.CreateNamespace(ctx, name); err != nil {
		t.Fatal(err)
	}
	return temporalNS{hostPort: shared.srv.HostPort(), namespace: name}
}

// namespaceFor names the n-th namespace after the test, in the letters,
// digits and dashes a namespace name may have, so the server's logs and a
// failing test's output say whose it is.
func namespaceFor(test string, n int64) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '-'
	}, test)
	if len(name) > 80 {
		name = name[:80]
	}
	return fmt.Sprintf("%s-%d", name, n)
}
