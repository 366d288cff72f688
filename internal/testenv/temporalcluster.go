package testenv

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// A Temporal cluster for tests: Temporal server built from the
// go.temporal.io/server module of this repository's go.mod (the version
// the embedded dev server runs), on a private PostgreSQL 15 cluster from
// Debian's packages (.ci/run installs them). The recipe and its timings
// are in deploy/README.md ("Testing against a real cluster").

// TemporalModule is the module the server binaries are built from; its
// version is the one go.mod requires.
const TemporalModule = "go.temporal.io/server"

// TemporalBinaries are the built temporal-server and temporal-sql-tool.
type TemporalBinaries struct {
	Version string
	Server  string // go.temporal.io/server/cmd/server
	SQLTool string // go.temporal.io/server/cmd/tools/sql
}

var (
	temporalBinMu sync.Mutex
	temporalBins  *TemporalBinaries
)

// BuildTemporal builds the Temporal server and its SQL schema tool from
// the module go.mod requires (`go build go.temporal.io/server/cmd/server`
// and `.../cmd/tools/sql`, both tool directives in go.mod), once per
// version: the binaries are kept in <GOCACHE>/../airlock-temporal-bin/<version>
// so that later runs reuse them (a cold build of the server takes about 4
// minutes on 2 cores; with a warm build cache about 40 s). Concurrent test
// processes build once (a file lock). It skips t (fails it under CI) when
// go is not on PATH; a failed build fails t.
func BuildTemporal(t testing.TB) *TemporalBinaries {
	t.Helper()
	temporalBinMu.Lock()
	defer temporalBinMu.Unlock()
	if temporalBins != nil {
		return temporalBins
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		Skipf(t, "go is not on PATH (needed to build the Temporal server): %v", err)
	}
	root := RepoRoot(t)
	goOut := func(args ...string) string {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = root
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(b))
	}
	version := goOut("list", "-m", "-f", "{{.Version}}", TemporalModule)
	cache := goOut("env", "GOCACHE")
	if cache == "" || cache == "off" {
		cache = os.TempDir()
	}
	dir := filepath.Join(filepath.Dir(cache), "airlock-temporal-bin", version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	bins := &TemporalBinaries{Version: version,
		Server: filepath.Join(dir, "temporal-server"), SQLTool: filepath.Join(dir, "temporal-sql-tool")}
	for bin, pkg := range map[string]string{bins.Server: TemporalModule + "/cmd/server", bins.SQLTool: TemporalModule + "/cmd/tools/sql"} {
		if _, err := os.Stat(bin); err == nil {
			continue
		}
		start := time.Now()
		tmp := bin + ".tmp"
		cmd := exec.Command(goBin, "build", "-o", tmp, pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s (for the Temporal cluster tests): %v\n%s", pkg, err, out)
		}
		if err := os.Rename(tmp, bin); err != nil {
			t.Fatal(err)
		}
		t.Logf("built %s %s in %s (cached in %s)", pkg, version, time.Since(start).Round(time.Second), dir)
	}
	temporalBins = bins
	return bins
}

// PostgresBinDir is where Debian's postgresql-15 package puts initdb and
// pg_ctl.
const PostgresBinDir = "/usr/lib/postgresql/15/bin"

// Postgres is a private PostgreSQL cluster on 127.0.0.1, removed at the
// end of the test.
type Postgres struct {
	Port int
	Dir  string // data directory and socket directory live under it
	bin  string
	asPG bool // commands run as the postgres user (we are root)
}

// StartPostgres initialises and starts a PostgreSQL 15 cluster in a fresh
// temporary directory on a free port (trust authentication, 127.0.0.1
// only, max_connections 300 for a Temporal server's pools). As root,
// initdb and pg_ctl run as the postgres user (initdb refuses root). It
// skips t (fails it under CI) when PostgreSQL 15 is not installed.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin := PostgresBinDir
	if _, err := os.Stat(filepath.Join(bin, "initdb")); err != nil {
		Skipf(t, "PostgreSQL 15 is not installed (%v): apt-get install -y postgresql (.ci/run does)", err)
	}
	pg := &Postgres{bin: bin, asPG: os.Geteuid() == 0}
	dir, err := os.MkdirTemp("", "airlock-pg-")
	if err != nil {
		t.Fatal(err)
	}
	pg.Dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if pg.asPG {
		if _, err := exec.LookPath("runuser"); err != nil {
			Skipf(t, "running as root needs runuser to start PostgreSQL as the postgres user: %v", err)
		}
		u, err := user.Lookup("postgres")
		if err != nil {
			Skipf(t, "running as root needs the postgres user (created by Debian's postgresql package): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		// The postgres user must reach the data directory.
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(data, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	pg.run(t, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")
	pg.Port = FreePort(t)
	pg.run(t, "pg_ctl", "-D", data, "-l", filepath.Join(data, "server.log"), "-w", "-o",
		fmt.Sprintf("-c listen_addresses=127.0.0.1 -c port=%d -c unix_socket_directories=%s -c max_connections=300 -c fsync=off", pg.Port, data), "start")
	t.Cleanup(func() {
		cmd := pg.command("pg_ctl", "-D", data, "-m", "immediate", "stop")
		_ = cmd.Run()
	})
	return pg
}

func (pg *Postgres) command(prog string, args ...string) *exec.Cmd {
	path := filepath.Join(pg.bin, prog)
	if pg.asPG {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (pg *Postgres) run(t testing.TB, prog string, args ...string) {
	t.Helper()
	if out, err := pg.command(prog, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TemporalServer is a temporal-server process (all four services in one
// process) on a Postgres cluster.
type TemporalServer struct {
	HostPort string // frontend gRPC, for clients
	HTTPPort int    // frontend HTTP API
	LogPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
}

// temporalConfig is the server configuration: the postgres12 plugin for
// persistence and SQL visibility (custom search attributes work there).
const temporalConfig = `log:
  stdout: true
  level: warn
persistence:
  defaultStore: default
  visibilityStore: visibility
  numHistoryShards: 4
  datastores:
    default:
      sql: {pluginName: postgres12, databaseName: temporal, connectAddr: "127.0.0.1:{{.PG}}", connectProtocol: tcp,
            user: temporal, password: temporal, maxConns: 20, maxIdleConns: 20, maxConnLifetime: 1h}
    visibility:
      sql: {pluginName: postgres12, databaseName: temporal_visibility, connectAddr: "127.0.0.1:{{.PG}}", connectProtocol: tcp,
            user: temporal, password: temporal, maxConns: 10, maxIdleConns: 10, maxConnLifetime: 1h}
global:
  membership: {maxJoinDuration: 30s, broadcastAddress: 127.0.0.1}
  metrics: {prometheus: {framework: tally, timerType: histogram, listenAddress: "127.0.0.1:{{.Metrics}}"}}
services:
  frontend: {rpc: {grpcPort: {{.Frontend}}, membershipPort: {{.FrontendM}}, bindOnLocalHost: true, httpPort: {{.HTTP}}}}
  matching: {rpc: {grpcPort: {{.Matching}}, membershipPort: {{.MatchingM}}, bindOnLocalHost: true}}
  history: {rpc: {grpcPort: {{.History}}, membershipPort: {{.HistoryM}}, bindOnLocalHost: true}}
  worker: {rpc: {grpcPort: {{.Worker}}, membershipPort: {{.WorkerM}}, bindOnLocalHost: true}}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active: {enabled: true, initialFailoverVersion: 1, rpcName: frontend, rpcAddress: "127.0.0.1:{{.Frontend}}"}
dcRedirectionPolicy: {policy: noop}
dynamicConfigClient: {filepath: "{{.DynamicConfig}}", pollInterval: 10s}
`

// temporalDynamicConfig: IDs as long as the dev server allows; the
// history transfer queue read at most every 1 ms instead of 50 ms (the
// default adds up to 50 ms to every workflow task); search attributes read
// fresh, so that ones just registered are usable at once; and the
// in-flight Updates per workflow that deploy/README.md asks a cluster for
// (issue 28: a task's concurrent calls).
const temporalDynamicConfig = `limit.maxIDLength:
  - value: 255
    constraints: {}
history.transferProcessorMaxPollRPS:
  - value: 1000
    constraints: {}
system.forceSearchAttributesCacheRefreshOnRead:
  - value: true
    constraints: {}
history.maxInFlightUpdates:
  - value: 64
    constraints: {}
`

// DefaultSchemaCommands create Temporal's two databases with the SQL
// tool's embedded schemas (postgresql/v12): the arguments of
// temporal-sql-tool, the connection coming from its SQL_* environment
// variables. deploy/README.md shows the same commands.
var DefaultSchemaCommands = [][]string{
	{"--db", "temporal", "create"},
	{"--db", "temporal", "setup-schema", "-v", "0.0"},
	{"--db", "temporal", "update-schema", "--schema-name", "postgresql/v12/temporal"},
	{"--db", "temporal_visibility", "create"},
	{"--db", "temporal_visibility", "setup-schema", "-v", "0.0"},
	{"--db", "temporal_visibility", "update-schema", "--schema-name", "postgresql/v12/visibility"},
}

// StartTemporal creates Temporal's two databases on pg by running the SQL
// tool with each of schema's argument lists (nil: DefaultSchemaCommands),
// its connection given as SQL_PLUGIN, SQL_HOST, SQL_PORT, SQL_USER and
// SQL_PASSWORD (user and password temporal); starts temporal-server on free
// ports and waits until its frontend serves the system namespace. The
// server is stopped at the end of the test. The namespace airlock uses is
// not created: that is the operator's step (deploy/README.md).
func StartTemporal(t testing.TB, pg *Postgres, bins *TemporalBinaries, schema [][]string) *TemporalServer {
	t.Helper()
	dir := filepath.Join(pg.Dir, "temporal")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	psql := pg.command("psql", "-h", "127.0.0.1", "-p", strconv.Itoa(pg.Port), "-U", "postgres", "-qc",
		"CREATE USER temporal WITH PASSWORD 'temporal' CREATEDB;")
	if out, err := psql.CombinedOutput(); err != nil {
		t.Fatalf("creating the temporal database user: %v\n%s", err, out)
	}
	if schema == nil {
		schema = DefaultSchemaCommands
	}
	for _, args := range schema {
		cmd := exec.Command(bins.SQLTool, args...)
		// The connection, as the tool's environment variables.
		cmd.Env = append(os.Environ(), "SQL_PLUGIN=postgres12", "SQL_HOST=127.0.0.1", "SQL_PORT="+strconv.Itoa(pg.Port),
			"SQL_USER=temporal", "SQL_PASSWORD=temporal")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("temporal-sql-tool %s: %v\n%s", strings.Join(args, " "), err, tail(out, 4000))
		}
	}

	ports := map[string]int{"PG": pg.Port}
	for _, k := range []string{"Frontend", "FrontendM", "HTTP", "Matching", "MatchingM", "History", "HistoryM", "Worker", "WorkerM", "Metrics"} {
		ports[k] = lowPort(t)
	}
	dyn := filepath.Join(dir, "dynamicconfig.yaml")
	if err := os.WriteFile(dyn, []byte(temporalDynamicConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := temporalConfig
	for k, v := range ports {
		cfg = strings.ReplaceAll(cfg, "{{."+k+"}}", strconv.Itoa(v))
	}
	cfg = strings.ReplaceAll(cfg, "{{.DynamicConfig}}", dyn)
	cfgPath := filepath.Join(dir, "temporal.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &TemporalServer{HostPort: fmt.Sprintf("127.0.0.1:%d", ports["Frontend"]), HTTPPort: ports["HTTP"],
		LogPath: filepath.Join(dir, "server.log"), exited: make(chan struct{})}
	logf, err := os.Create(s.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(bins.Server, "--config-file", cfgPath, "--allow-no-auth", "start")
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.cmd.Wait(); logf.Close(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.exited:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(s.LogPath)
			t.Logf("temporal-server log (last 4000 bytes):\n%s", tail(b, 4000))
		}
	})
	// Ready when the frontend answers for the system namespace: a listening
	// port alone comes before the services are.
	url := fmt.Sprintf("http://127.0.0.1:%d/api/v1/namespaces/temporal-system", s.HTTPPort)
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-s.exited:
			t.Fatalf("temporal-server exited during start-up (its log follows)")
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(s.LogPath)
			t.Fatalf("temporal-server not ready after 90s (GET %s: %v):\n%s", url, err, tail(b, 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lowPort returns a free port below 32768: Temporal's SQL schema stores
// membership ports as smallint, and the kernel's ephemeral ports (what
// FreePort gets) start at 32768.
func lowPort(t testing.TB) int {
	t.Helper()
	for range 1000 {
		p := 10000 + rand.IntN(22000)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port below 32768")
	return 0
}

func tail(b []byte, n int) []byte {
	b = bytes.TrimSpace(b)
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
