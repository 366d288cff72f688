package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"go.temporal.io/sdk/client"
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
