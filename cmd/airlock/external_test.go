package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/internal/identity"
)

// TestLoadVersionExternalPolicy: a worker's version carries the external
// PDP client of external_policy, its Authorization header from the
// environment; an unset variable refuses the version, naming it.
func TestLoadVersionExternalPolicy(t *testing.T) {
	dir := t.TempDir()
	cfg := `manifests: [fs.yaml]
principals:
  - {name: alice, roles: [all], api_key_sha256: [` + identity.HashKey("k") + `]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
external_policy:
  endpoint: http://127.0.0.1:8181/pdp
  authorization_env: AIRLOCK_TEST_PDP_AUTH
`
	for name, content := range map[string]string{"airlock.yaml": cfg,
		"fs.yaml": "server:\n  name: fs\n  stdio: {command: fs-server}\ntools:\n  read: {side_effects: [read], data_access_level: public, risk: low}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e, err := load(commonFlags{config: filepath.Join(dir, "airlock.yaml"), logLevel: "error", logFormat: "json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AIRLOCK_TEST_PDP_AUTH", "")
	if _, err := e.loadVersion(nil, roles{worker: true}, nil); err == nil || !strings.Contains(err.Error(), "external_policy.authorization_env names AIRLOCK_TEST_PDP_AUTH, which is not set") {
		t.Fatalf("unset variable: %v", err)
	}
	if v, err := e.loadVersion(nil, roles{gateway: true}, nil); err != nil || v.judge != nil {
		t.Fatalf("a gateway alone needs no PDP: %v", err)
	}
	t.Setenv("AIRLOCK_TEST_PDP_AUTH", "Bearer t")
	v, err := e.loadVersion(nil, roles{worker: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if x := v.judge.External; x == nil || x.Client.URL() != "http://127.0.0.1:8181/pdp/access/v1/evaluation" || x.AppliesTo != "not_denied" {
		t.Fatalf("external %+v", v.judge.External)
	}
}
