package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
)

// tlsFlags say how to reach a Temporal cluster that needs TLS (mTLS client
// certificates) or an API key (Temporal Cloud). Each flag defaults to the
// environment variable the Temporal CLI uses, so one environment serves
// both tools. Secrets are read from files or the environment, never from
// flags (flags show in `ps`).
type tlsFlags struct {
	enabled    bool
	cert, key  string
	ca         string
	serverName string
}

func (t *tlsFlags) register(fs *flag.FlagSet) {
	on, _ := strconv.ParseBool(os.Getenv("TEMPORAL_TLS"))
	fs.BoolVar(&t.enabled, "temporal-tls", on, "connect to Temporal over TLS (env TEMPORAL_TLS; implied by the other TLS flags and by TEMPORAL_API_KEY)")
	fs.StringVar(&t.cert, "temporal-tls-cert", os.Getenv("TEMPORAL_TLS_CLIENT_CERT_PATH"), "mTLS client certificate `file` (PEM; env TEMPORAL_TLS_CLIENT_CERT_PATH)")
	fs.StringVar(&t.key, "temporal-tls-key", os.Getenv("TEMPORAL_TLS_CLIENT_KEY_PATH"), "mTLS client key `file` (PEM; env TEMPORAL_TLS_CLIENT_KEY_PATH)")
	fs.StringVar(&t.ca, "temporal-tls-ca", os.Getenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH"), "CA certificate `file` to trust for the server (PEM; env TEMPORAL_TLS_SERVER_CA_CERT_PATH; default: system roots)")
	fs.StringVar(&t.serverName, "temporal-tls-server-name", os.Getenv("TEMPORAL_TLS_SERVER_NAME"), "expected server `name` in its certificate (env TEMPORAL_TLS_SERVER_NAME)")
}

// clientOptions fills the connection part of client.Options. The API key
// comes from TEMPORAL_API_KEY only.
func (t tlsFlags) clientOptions(o *client.Options) error {
	apiKey := os.Getenv("TEMPORAL_API_KEY")
	if !t.enabled && t.cert == "" && t.key == "" && t.ca == "" && t.serverName == "" && apiKey == "" {
		return nil
	}
	if (t.cert == "") != (t.key == "") {
		return errors.New("--temporal-tls-cert and --temporal-tls-key go together: pass both (client certificate and its key) or neither")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName}
	if t.cert != "" {
		pair, err := tls.LoadX509KeyPair(t.cert, t.key)
		if err != nil {
			return fmt.Errorf("--temporal-tls-cert %s / --temporal-tls-key %s: %w (both must be PEM files of one key pair)", t.cert, t.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if t.ca != "" {
		pem, err := os.ReadFile(t.ca)
		if err != nil {
			return fmt.Errorf("--temporal-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--temporal-tls-ca %s: no PEM certificate found in the file", t.ca)
		}
		cfg.RootCAs = pool
	}
	o.ConnectionOptions.TLS = cfg
	if apiKey != "" {
		o.Credentials = client.NewAPIKeyStaticCredentials(apiKey)
	}
	return nil
}

// temporalFlags are the connection flags of the one-shot commands that
// talk to Temporal (tasks, audit, approvals, run).
type temporalFlags struct {
	address, namespace string
	// taskQueue is where workflows these commands start run (tasks
	// rollback of an ended task).
	taskQueue string
	tls       tlsFlags
}

func (t *temporalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.address, "temporal-address", firstNonEmpty(os.Getenv("TEMPORAL_ADDRESS"), "127.0.0.1:7233"), "Temporal frontend `host:port`")
	fs.StringVar(&t.namespace, "namespace", firstNonEmpty(os.Getenv("TEMPORAL_NAMESPACE"), "default"), "Temporal `namespace`")
	fs.StringVar(&t.taskQueue, "task-queue", api.DefaultTaskQueue, "the workers' task `queue` (rolling back a task that has ended starts a workflow there)")
	t.tls.register(fs)
}

// registerOverConfig registers the connection flags of a command whose
// configuration's temporal block comes between the flags and airlock dev's
// defaults (approvals): the address and namespace default to the
// environment only, and the command fills in the rest.
func (t *temporalFlags) registerOverConfig(fs *flag.FlagSet) {
	fs.StringVar(&t.address, "temporal-address", os.Getenv("TEMPORAL_ADDRESS"), "Temporal frontend `host:port` (env TEMPORAL_ADDRESS; default: the config's, else 127.0.0.1:7233)")
	fs.StringVar(&t.namespace, "namespace", os.Getenv("TEMPORAL_NAMESPACE"), "Temporal `namespace` (env TEMPORAL_NAMESPACE; default: the config's, else \"default\")")
	t.tls.register(fs)
}

// dial connects, or reports why not and returns the exit code.
func (t *temporalFlags) dial(ctx context.Context, c *Call) (client.Client, int) {
	// Dialing has its own bound, shorter than the command's, so a host that
	// accepts connections but never answers is reported quickly (the SDK's
	// own health check gives up after about 5s).
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	copts := client.Options{HostPort: t.address, Namespace: t.namespace, Logger: quietLogger{}}
	if err := t.tls.clientOptions(&copts); err != nil {
		return nil, c.usage("%v", err)
	}
	tc, err := client.DialContext(dctx, copts)
	if err != nil {
		return nil, c.fail(fmt.Errorf("cannot connect to Temporal at %s (namespace %s): %v\nIs airlock dev running? For another cluster pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS).", t.address, t.namespace, err))
	}
	return tc, 0
}

// run dials Temporal and runs f with the client, the whole within
// timeout; a failure to connect is reported for c.
func (t *temporalFlags) run(c *Call, timeout time.Duration, f func(ctx context.Context, tc client.Client) int) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tc, code := t.dial(ctx, c)
	if tc == nil {
		return code
	}
	defer tc.Close()
	return f(ctx, tc)
}

// quietLogger drops the SDK's client logs in one-shot commands.
type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}
