package integration

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-run/airlock/internal/consent/consenttest"
	"github.com/airlock-run/airlock/internal/credstore"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// TestUserConsentSurvivesKill runs `airlock dev` with an upstream with
// user_oauth (the fake authorization server and the upstream in the test
// process) and kills it with SIGKILL twice: between alice's elicitation and
// her callback (a restarted dev finishes the flow the dead one began), and
// between the callback and her next call (the restarted dev uses the
// credential stored before the kill). Nothing is lost and nothing is
// duplicated: the provider redeemed one code, the store holds one
// credential, the replayed callback is refused. `airlock credentials list`
// shows it without a token, `revoke` deletes it, and the next call elicits
// again. The dev's output holds no token, code or link.
func TestUserConsentSurvivesKill(t *testing.T) {
	d := newCounterDev(t, "  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")
	args, base, _ := d.devArgs(t, "--no-ui")
	p := consenttest.Start("airlock", "code-secret", base+manifests.ConsentCallbackPath)
	t.Cleanup(p.Close)
	up := startCodeUpstream(t, p)
	writeFile(t, filepath.Join(d.dir, "code.yaml"), `server:
  name: code
  http:
    url: `+up.url+`
    auth:
      user_oauth:
        authorize_url: `+p.URL+`/authorize
        token_url: `+p.URL+`/token
        revocation_url: `+p.URL+`/revoke
        client_id: airlock
        client_secret_env: CODE_CLIENT_SECRET
        redirect_url: `+base+manifests.ConsentCallbackPath+`
        scopes: [repo]
tools:
  whoami:
    side_effects: [read]
    data_access_level: public
    risk: low
    idempotent: true
`)
	cfg := filepath.Join(d.dir, "airlock.yaml")
	writeFile(t, cfg, `manifests: [counter.yaml, code.yaml]
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`)
	env := []string{"CODE_CLIENT_SECRET=code-secret", credstore.EnvKeys + "=k1:" + credstore.NewKey()}
	kill := func(dp *devProcess) {
		t.Helper()
		if err := dp.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-dp.exited
	}
	var outputs []string

	// 1. The elicitation, then kill -9.
	p1 := startDevEnv(t, env, d.bin, args...)
	p1.waitHealthy(t, base)
	cs := connectConsent(t, base+"/mcp", "alice-key", false, nil)
	waitTools(t, cs, "code__whoami")
	link, _ := consentLink(t, cs, "code__whoami", map[string]any{"n": 1})
	if !strings.HasPrefix(link, base+manifests.ConsentStartPath) {
		t.Fatalf("link %s", link)
	}
	kill(p1)
	outputs = append(outputs, p1.output())

	// 2. A restarted dev finishes the flow; then kill -9 before the call.
	p2 := startDevEnv(t, env, d.bin, args...)
	p2.waitHealthy(t, base)
	browser := consentBrowser("alice")
	cb := ""
	b2 := *browser
	b2.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if r.URL.Path == manifests.ConsentCallbackPath {
			cb = r.URL.String()
		}
		return nil
	}
	if st, body, err := authorize(&b2, link); err != nil || st != 200 || !strings.Contains(body, "as alice") {
		t.Fatalf("consent after the restart: %d %s %v", st, body, err)
	}
	kill(p2)
	outputs = append(outputs, p2.output())

	// 3. A restarted dev runs the call as alice with what was stored.
	p3 := startDevEnv(t, env, d.bin, args...)
	p3.waitHealthy(t, base)
	cs3 := connectConsent(t, base+"/mcp", "alice-key", false, nil)
	waitTools(t, cs3, "code__whoami")
	if res := call(t, cs3, "code__whoami", map[string]any{"n": 2}, ""); res.IsError || text(res) != "whoami #2 as alice" {
		t.Fatalf("alice's call after two kills: %s", text(res))
	}
	if st, _, _ := authorize(browser, cb); st == 200 {
		t.Fatal("the callback replayed after the restarts was accepted")
	}
	if redeemed, _, _, _ := p.Counts(); redeemed != 1 {
		t.Fatalf("the provider redeemed %d codes, want 1", redeemed)
	}
	if got := up.runs(); len(got) != 1 || got[0] != "whoami:alice" {
		t.Fatalf("the upstream ran %v", got)
	}

	// 4. The command line: list (no token), revoke; the next call elicits.
	cli := func(args ...string) string {
		t.Helper()
		c := exec.Command(d.bin, args...)
		c.Env = append(os.Environ(), env...)
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("airlock %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	dataDir := filepath.Join(d.dir, "data")
	listed := cli("credentials", "list", "--config", cfg, "--data-dir", dataDir)
	if strings.Count(listed, "\nalice ") != 1 || !strings.Contains(listed, "repo") {
		t.Fatalf("credentials list:\n%s", listed)
	}
	if out := cli("credentials", "revoke", "--config", cfg, "--data-dir", dataDir, "alice", "code"); !strings.Contains(out, "revoked at the provider") {
		t.Fatalf("revoke: %s", out)
	}
	link2, _ := consentLink(t, cs3, "code__whoami", map[string]any{"n": 3})
	if link2 == link {
		t.Fatal("the same link twice")
	}
	_ = cs3.Close()
	kill(p3)
	outputs = append(outputs, p3.output())

	audit, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	if err != nil || !strings.Contains(string(audit), `"event":"credential_stored","principal":"alice"`) || !strings.Contains(string(audit), `"event":"credential_revoked","principal":"alice"`) {
		t.Fatalf("the audit stream: %v\n%s", err, audit)
	}
	all := strings.Join(outputs, "\n") + listed + string(audit)
	if !strings.Contains(all, "sent to consent") || !strings.Contains(all, "consent: credential stored") {
		t.Fatalf("the dev's logs do not show the flow:\n%.3000s", all)
	}
	secrets := append(p.Issued(), "code-secret", env[1][len(credstore.EnvKeys)+4:])
	for _, l := range []string{link, link2} {
		secrets = append(secrets, l[strings.Index(l, "id=")+3:])
	}
	for _, sec := range secrets {
		if strings.Contains(all, sec) {
			t.Fatalf("the dev's output holds a secret (%.8s…)", sec)
		}
	}
}
