package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

// writePair writes a self-signed certificate and its key as PEM files.
func writePair(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func TestTLSClientOptions(t *testing.T) {
	dir := t.TempDir()
	cert, key := writePair(t, dir)
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		flags     tlsFlags
		apiKey    string
		wantTLS   bool
		wantCerts int
		wantRoots bool
		wantCreds bool
		wantErr   string
	}{
		{name: "plain text by default"},
		{name: "tls on, system roots", flags: tlsFlags{enabled: true}, wantTLS: true},
		{name: "mtls with CA", flags: tlsFlags{cert: cert, key: key, ca: cert, serverName: "temporal.internal"}, wantTLS: true, wantCerts: 1, wantRoots: true},
		{name: "api key implies tls", apiKey: "secret", wantTLS: true, wantCreds: true},
		{name: "cert without key", flags: tlsFlags{cert: cert}, wantErr: "go together"},
		{name: "unreadable pair", flags: tlsFlags{cert: filepath.Join(dir, "nope.pem"), key: key}, wantErr: "--temporal-tls-cert"},
		{name: "CA file without PEM", flags: tlsFlags{ca: notPEM}, wantErr: "no PEM certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TEMPORAL_API_KEY", tc.apiKey)
			var o client.Options
			err := tc.flags.clientOptions(&o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := o.ConnectionOptions.TLS
			if (cfg != nil) != tc.wantTLS {
				t.Fatalf("TLS config %v, want TLS=%v", cfg, tc.wantTLS)
			}
			if cfg != nil {
				if len(cfg.Certificates) != tc.wantCerts || (cfg.RootCAs != nil) != tc.wantRoots || cfg.ServerName != tc.flags.serverName {
					t.Fatalf("TLS config: certs=%d roots=%v server=%q", len(cfg.Certificates), cfg.RootCAs != nil, cfg.ServerName)
				}
			}
			if (o.Credentials != nil) != tc.wantCreds {
				t.Fatalf("credentials %v, want %v", o.Credentials, tc.wantCreds)
			}
		})
	}
}
