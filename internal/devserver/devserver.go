package devserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	"go.temporal.io/server/common/primitives"
	temporalsrv "go.temporal.io/server/temporal"
)

// Defaults applied by Start to zero-valued Options fields.
const (
	DefaultNamespace = "default"
	DefaultIP        = "127.0.0.1"
	DefaultRetention = 30 * 24 * time.Hour
	DefaultLogLevel  = "warn"
)

const (
	dbFileName  = "temporal.db"
	clusterName = "active"
	// readyTimeout bounds the wait for the frontend after the services start.
	readyTimeout = 30 * time.Second
)

// Options configures Start. The zero value of every field except DataDir is
// usable.
type Options struct {
	// DataDir holds the SQLite database and the lock file. Created with mode
	// 0700 if missing. Required.
	DataDir string
	// Namespace is created on first use. Default "default".
	Namespace string
	// Port is the frontend gRPC port; 0 picks a free one (see HostPort).
	Port int
	// IP the frontend binds to. Default 127.0.0.1. The internal services
	// always bind to 127.0.0.1.
	IP string
	// SearchAttributes are registered on the namespace at every start; an
	// existing attribute with a different type is an error.
	SearchAttributes map[string]enumspb.IndexedValueType
	// Retention of closed workflows. Default 30 days. An existing namespace
	// with a shorter retention is raised to it, never lowered.
	Retention time.Duration
	// Data is set in the namespace's data at every start (keys merged, the
	// rest kept), so a client of this server can learn what runs it:
	// airlock dev records its data dir and audit log there.
	Data map[string]string
	// Logger receives the server's logs. The zero Logger discards them.
	Logger zerolog.Logger
	// LogLevel filters the server's logs: debug, info, warn or error.
	// Default warn, because the server is noisy at info.
	LogLevel string
	// UIPort is reserved for the Temporal web UI; 0 means no UI. Any other
	// value is rejected for now.
	UIPort int
}

// Server is a running embedded Temporal server. Stop it to release the data
// directory.
type Server struct {
	srv       temporalsrv.Server
	logger    *serverLogger
	lock      *dirLock
	hostPort  string
	namespace string
	// opts are Start's options with the defaults applied; CreateNamespace
	// configures new namespaces like the first.
	opts Options

	stopOnce sync.Once
	stopErr  error
}

// Start opens (or creates) the database in opts.DataDir, starts Temporal on
// it and returns once the frontend answers and the namespace is configured.
// It fails with an error wrapping ErrLocked if another Server holds the
// directory. ctx bounds the wait for readiness and the namespace setup.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	minLevel, err := zerolog.ParseLevel(opts.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("devserver: log level %q: %w", opts.LogLevel, err)
	}
	logger := newServerLogger(opts.Logger, minLevel)

	dir, err := filepath.Abs(opts.DataDir)
	if err != nil {
		return nil, fmt.Errorf("devserver: data dir %s: %w", opts.DataDir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("devserver: create data dir: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	s := &Server{lock: lock, logger: logger, namespace: opts.Namespace, opts: opts}
	if err := s.start(ctx, dir, opts, logger); err != nil {
		// Stop is safe here: it skips the server if it never started.
		if stopErr := s.Stop(); stopErr != nil {
			err = errors.Join(err, stopErr)
		}
		return nil, fmt.Errorf("devserver: %w", err)
	}
	return s, nil
}

func (o *Options) setDefaults() error {
	if o.DataDir == "" {
		return errors.New("data dir is required")
	}
	if o.UIPort != 0 {
		return errors.New("the web ui is not supported yet: set UIPort to 0")
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.IP == "" {
		o.IP = DefaultIP
	}
	// The server calls log.Fatal (os.Exit) on an unparsable bind IP, so catch
	// it here.
	if net.ParseIP(o.IP) == nil {
		return fmt.Errorf("ip %q is not an IP address", o.IP)
	}
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("port %d out of range", o.Port)
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Retention < 24*time.Hour {
		// The server rejects namespaces retaining closed workflows for less
		// than a day.
		return fmt.Errorf("retention %s is shorter than the server's minimum of 24h", o.Retention)
	}
	if o.LogLevel == "" {
		o.LogLevel = DefaultLogLevel
	}
	return nil
}

func (s *Server) start(ctx context.Context, dir string, opts Options, logger *serverLogger) error {
	sqlCfg, err := prepareDatabase(filepath.Join(dir, dbFileName), opts.Namespace, opts.Retention)
	if err != nil {
		return err
	}

	ports, err := pickPorts(opts.IP, opts.Port)
	if err != nil {
		return err
	}
	// Clients and the other services dial the frontend here; an unspecified
	// bind address (0.0.0.0, ::) is reachable on loopback.
	dialIP := opts.IP
	if net.ParseIP(dialIP).IsUnspecified() {
		dialIP = DefaultIP
	}
	s.hostPort = net.JoinHostPort(dialIP, strconv.Itoa(ports.frontend))

	cfg := serverConfig(sqlCfg, opts.IP, dialIP, ports)
	authorizer, err := authorization.GetAuthorizerFromConfig(&cfg.Global.Authorization)
	if err != nil {
		return fmt.Errorf("create authorizer: %w", err)
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&cfg.Global.Authorization, logger)
	if err != nil {
		return fmt.Errorf("create claim mapper: %w", err)
	}
	hosts := map[primitives.ServiceName]static.Hosts{
		primitives.FrontendService: static.SingleLocalHost(s.hostPort),
		primitives.HistoryService:  static.SingleLocalHost(loopback(ports.history)),
		primitives.MatchingService: static.SingleLocalHost(loopback(ports.matching)),
		primitives.WorkerService:   static.SingleLocalHost(loopback(ports.worker)),
	}
	srv, err := temporalsrv.NewServer(
		temporalsrv.WithConfig(cfg),
		temporalsrv.ForServices(temporalsrv.DefaultServices),
		temporalsrv.WithStaticHosts(hosts),
		temporalsrv.WithLogger(logger),
		temporalsrv.WithAuthorizer(authorizer),
		temporalsrv.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporalsrv.WithDynamicConfigClient(dynamicConfig()),
	)
	if err != nil {
		return fmt.Errorf("create temporal server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start temporal server: %w", err)
	}
	s.srv = srv

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	return configureNamespace(ctx, s.hostPort, opts, logger.level())
}

// HostPort is the frontend's gRPC address, for client.Options.HostPort.
func (s *Server) HostPort() string { return s.hostPort }

// Namespace is the namespace Start created or found.
func (s *Server) Namespace() string { return s.namespace }

// Stop shuts the server down and releases the data directory. Calls after
// the first return the first call's result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if s.srv != nil {
			// Silence the server for good before stopping it. While shutting
			// down, its services log warnings and "context canceled" errors
			// for every poll and call cut short by the others going away.
			// Afterwards, some of its internal clients keep retrying the
			// closed ports in the background, and their logs would mislead,
			// in particular next to a new Server. Nothing is lost: a failed
			// shutdown is no worse than kill -9, which the database survives.
			s.logger.setLevel(zerolog.Disabled)
			if err := s.srv.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("stop temporal server: %w", err))
			}
		}
		if err := s.lock.release(); err != nil {
			errs = append(errs, err)
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

func serverConfig(sqlCfg *config.SQL, bindIP, dialIP string, p ports) *config.Config {
	frontendHTTP := net.JoinHostPort(dialIP, strconv.Itoa(p.frontendHTTP))
	cfg := &config.Config{}
	cfg.Global.Membership = config.Membership{MaxJoinDuration: 30 * time.Second, BroadcastAddress: loopbackIP}
	cfg.Persistence = config.Persistence{
		DefaultStore:     "sqlite-default",
		VisibilityStore:  "sqlite-default",
		NumHistoryShards: 1,
		DataStores:       map[string]config.DataStore{"sqlite-default": {SQL: sqlCfg}},
	}
	cfg.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             net.JoinHostPort(dialIP, strconv.Itoa(p.frontend)),
				HTTPAddress:            frontendHTTP,
			},
		},
	}
	cfg.DCRedirectionPolicy.Policy = "noop"
	cfg.Services = map[string]config.Service{
		// HTTPPort enables the frontend's HTTP API, which Nexus needs;
		// without it the server warns at every start.
		string(primitives.FrontendService): {RPC: config.RPC{GRPCPort: p.frontend, HTTPPort: p.frontendHTTP, BindOnIP: bindIP}},
		string(primitives.HistoryService):  {RPC: config.RPC{GRPCPort: p.history, BindOnIP: loopbackIP}},
		string(primitives.MatchingService): {RPC: config.RPC{GRPCPort: p.matching, BindOnIP: loopbackIP}},
		string(primitives.WorkerService):   {RPC: config.RPC{GRPCPort: p.worker, BindOnIP: loopbackIP}},
	}
	cfg.Archival.History.State = "disabled"
	cfg.Archival.Visibility.State = "disabled"
	cfg.NamespaceDefaults.Archival.History.State = "disabled"
	cfg.NamespaceDefaults.Archival.Visibility.State = "disabled"
	// The server panics at start without a public client address.
	cfg.PublicClient.HostPort = net.JoinHostPort(dialIP, strconv.Itoa(p.frontend))
	return cfg
}

// dynamicConfig tunes the server for one process on one machine. The
// defaults assume a cluster: queue readers are rate-limited to 20 reads/s per
// shard, which turned each activity round trip into ~50 ms steps, and task
// queues are split into 4 partitions whose forwarding is rate-limited too.
func dynamicConfig() dynamicconfig.StaticClient {
	return dynamicconfig.StaticClient{
		dynamicconfig.TransferProcessorMaxPollRPS.Key():   1000,
		dynamicconfig.TimerProcessorMaxPollRPS.Key():      1000,
		dynamicconfig.VisibilityProcessorMaxPollRPS.Key(): 1000,
		// One partition from the database's first start: lowering the count
		// later would strand tasks queued in the removed partitions.
		dynamicconfig.MatchingNumTaskqueueReadPartitions.Key():  1,
		dynamicconfig.MatchingNumTaskqueueWritePartitions.Key(): 1,
		// The Temporal CLI's dev-server defaults. The two refresh-on-read
		// settings make a search attribute usable right after it is added.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key():      true,
		dynamicconfig.ForceNexusEndpointRefreshOnRead.Key():              true,
		dynamicconfig.FrontendPersistenceMaxQPS.Key():                    10000,
		dynamicconfig.HistoryPersistenceMaxQPS.Key():                     45000,
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8096,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		// A task takes its calls as Updates, each in flight until it
		// completes: Temporal's default of 10 per workflow turned a burst
		// of parallel calls in one task into a storm of refused and
		// aborted Updates (issue 28). The gateway sends a task at most
		// gateway.task_concurrency (32) at once; the rest of the 64 is
		// room for calls waiting for approval, decisions and rollbacks.
		// workflows.fastHeadroom must match it (RATIONALE.md, "Why do
		// counted calls not take the fast path?").
		dynamicconfig.WorkflowExecutionMaxInFlightUpdates.Key(): MaxInFlightUpdates,
	}
}

// MaxInFlightUpdates is the server's history.maxInFlightUpdates: how many
// Updates of one workflow (an agent task's calls) may be in flight at once.
const MaxInFlightUpdates = 64
