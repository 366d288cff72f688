package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
)

// reloadRoleConfig is an airlock.yaml whose principals are given, with
// their Slack user IDs and API keys, and the approver group "leads" of
// the given members.
func reloadRoleConfig(principals, leads string) string {
	return `manifests: [fs.yaml]
principals:
` + principals + `roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
approver_groups:
  leads: {members: [` + leads + `]}
`
}

// startRoleReload writes the configuration and its manifest to a fresh
// directory and loads it as a role does; it returns the env and the
// configuration's path.
func startRoleReload(t *testing.T, config string) (*env, string) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "airlock.yaml")
	writeFile(t, path, config)
	writeFile(t, filepath.Join(dir, "fs.yaml"), "server:\n  name: fs\n  stdio: {command: fs-server}\ntools:\n  read: {side_effects: [read], data_access_level: public, risk: low}\n")
	e, err := load(commonFlags{config: path, logLevel: "error", logFormat: "json"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return e, path
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write a temporary file and rename it over path, as editors do, so
	// that the watcher never reads a half-written file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestApproverRoleReloads: `airlock approver` reloads who a Slack user is
// on SIGHUP and when airlock.yaml changes (its wiring: notifyHUP,
// approverReload, watchReload), and keeps the running principals when the
// new file is invalid.
func TestApproverRoleReloads(t *testing.T) {
	alice := "  - {name: alice, roles: [all], slack_user_id: U1, api_key_sha256: [" + identity.HashKey("alice-key") + "]}\n"
	bob := "  - {name: bob, roles: [all], slack_user_id: U2, api_key_sha256: [" + identity.HashKey("bob-key") + "]}\n"
	e, path := startRoleReload(t, reloadRoleConfig(alice, "alice"))
	dir := identity.New(e.snap.Config)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hup := notifyHUP()
	rl := approverReload(e, dir)
	watchReload(ctx, e, rl, hup)

	// SIGHUP: a real signal to this process, caught by notifyHUP.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the SIGHUP reload", time.Minute, func() bool { return rl.Generation() >= 1 })

	// A change to the file: bob becomes an approver, alice leaves.
	writeFile(t, path, reloadRoleConfig(bob, "bob"))
	testenv.WaitFor(t, "bob as Slack user U2", time.Minute, func() bool { _, ok := dir.BySlackUser("U2"); return ok })
	if _, ok := dir.BySlackUser("U1"); ok {
		t.Error("alice (U1) is still a principal after she was removed")
	}
	if got := rl.Current().groups["leads"]; !slices.Equal(got, []string{"bob"}) {
		t.Errorf("approver group leads = %v after the reload, want [bob]", got)
	}

	// An invalid file keeps the running version.
	gen := rl.Generation()
	writeFile(t, path, reloadRoleConfig(bob, "bob")+"policy: {rules: [{name: x, when: 'args.x ==', effect: deny}]}\n")
	if err := rl.Reload("test"); err == nil {
		t.Fatal("an invalid configuration reloaded")
	}
	if _, ok := dir.BySlackUser("U2"); !ok || rl.Generation() != gen {
		t.Errorf("an invalid file replaced the running principals (generation %d, was %d)", rl.Generation(), gen)
	}
}

// TestGatewayRoleReloadsPrincipals: the gateway role's reload (startReload
// with roles{gateway}) replaces the principals its API keys resolve to
// when airlock.yaml changes.
func TestGatewayRoleReloadsPrincipals(t *testing.T) {
	alice := "  - {name: alice, roles: [all], api_key_sha256: [" + identity.HashKey("alice-key") + "]}\n"
	carol := "  - {name: carol, roles: [all], api_key_sha256: [" + identity.HashKey("carol-key") + "]}\n"
	e, path := startRoleReload(t, reloadRoleConfig(alice, "alice"))
	s := &stack{env: e, dir: identity.New(e.snap.Config)}
	if err := s.startReload(roles{gateway: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	watchReload(ctx, e, s.cfg, notifyHUP())
	who := func(key string) string {
		p, err := s.dir.Authenticate(http.Header{"Authorization": {"Bearer " + key}})
		if err != nil {
			return ""
		}
		return p.Name
	}
	if got := who("alice-key"); got != "alice" {
		t.Fatalf("alice's key is %q before the reload", got)
	}
	writeFile(t, path, reloadRoleConfig(alice+carol, "carol"))
	testenv.WaitFor(t, "carol's key", time.Minute, func() bool { return who("carol-key") == "carol" })
	if got := who("alice-key"); got != "alice" {
		t.Errorf("alice's key is %q after the reload", got)
	}
	if got := s.cfg.Current().groups["leads"]; !slices.Equal(got, []string{"carol"}) {
		t.Errorf("approver group leads = %v after the reload, want [carol]", got)
	}
}
