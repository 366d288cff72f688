package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/identity"
)

// TestTokenExchangeKilledMidCall (issue 31 §2, "kill -9 in the middle"):
// `airlock dev` with an upstream that acts as the user (token exchange,
// held grants, airlock named as actor), against the real OpenID provider
// in the test. alice's deploy (not idempotent) and bob's whoami
// (idempotent) are IN the upstream call, which holds them, when dev is
// killed with SIGKILL; dev is restarted on the same data directory. What
// each call's outcome says is what happened:
//   - alice's deploy reached the upstream once, as alice; after the restart
//     it is answered unknown (the process stopped mid-call) and not re-run;
//   - bob's whoami is re-run by the restarted worker, with a fresh exchange,
//     as bob again (never as alice), and its result recorded as acted by
//     bob;
//   - no token (the sign-ins, every token the provider issued, the bearers
//     the upstream saw, the client secret) is in either history or in dev's
//     output (its logs and audit stream) before or after the kill.
func TestTokenExchangeKilledMidCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("subprocess crash test; skipped with -short")
	}
	p := startExchangeProvider(t)
	up := startTicketsUpstream(t, p.issuer)
	d := counterDev{bin: buildBinary(t, "./cmd/airlock"), dir: t.TempDir()}
	args, base, temporal := d.devArgs(t, "--no-ui", "--audit-log", "stdout")
	resource := base + "/mcp"
	writeFile(t, filepath.Join(d.dir, "desk.yaml"), fmt.Sprintf(`server:
  name: desk
  http:
    url: %s
    auth:
      token_exchange:
        token_url: %s/oauth/token
        client_id: airlock
        client_secret_env: TICKETS_EXCHANGE_SECRET
        audience: tickets
        scopes: [tickets.write]
        actor: true
        offline: true
tools:
  whoami: {side_effects: [none], data_access_level: public, risk: low, idempotent: true, timeout: 5m}
  deploy: {side_effects: [write], data_access_level: public, risk: low, idempotent: false, timeout: 5m}
`, up.url, p.issuer))
	writeFile(t, filepath.Join(d.dir, "airlock.yaml"), fmt.Sprintf(`manifests: [desk.yaml]
principals:
  - {name: ops, roles: [all], api_key_sha256: [%s]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
principals_from_tokens:
  resource: %s
  issuers:
    - {issuer: %s, name: corp}
  roles:
    - {roles: [all], when: 'claims.sub != ""'}
`, identity.HashKey("ops-key"), resource, p.issuer))
	key, err := exchange.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{exchange.EnvKey + "=" + exchange.EncodeKey(key.Bytes()), "TICKETS_EXCHANGE_SECRET=exchange-secret"}
	p1 := startDevEnv(t, env, d.bin, args...)
	p1.waitHealthy(t, base)

	toks := map[string]string{}
	tasks := map[string]string{}
	for _, who := range []string{"alice", "bob"} {
		toks[who] = p.signIn(t, who, resource, time.Hour)
		cs := connectURL(t, resource, map[string]string{"Authorization": "Bearer " + toks[who]})
		res := call(t, cs, "desk__whoami", map[string]any{"n": 1}, "")
		if res.IsError || text(res) != "whoami #1 as "+who {
			t.Fatalf("%s's first whoami: %s", who, text(res))
		}
		tasks[who], _ = res.Meta[gateway.MetaTask].(string)
		tool := map[string]string{"alice": "deploy", "bob": "whoami"}[who]
		before := len(up.runs(tool))
		up.holdNext(tool, 1)
		_ = callAsync(cs, "desk__"+tool, map[string]any{"n": 2}) // answered by the kill: the session ends
		waitFor(t, who+"'s "+tool+" to be in the upstream call", time.Minute, func() bool { return len(up.runs(tool)) > before })
	}

	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p1.exited
	p2 := startDevEnv(t, env, d.bin, args...)
	p2.waitHealthy(t, base)
	c := dialTest(t, temporal, "default")

	waitFor(t, "alice's deploy to be answered unknown", time.Minute, func() bool {
		return strings.Contains(historyOf(t, c, tasks["alice"]), "stopped mid-call")
	})
	waitFor(t, "bob's whoami to be re-run", time.Minute, func() bool {
		return strings.Count(historyOf(t, c, tasks["bob"]), `"ActedAs":{"Subject":"bob"`) >= 2
	})
	if got := up.runs("deploy"); !slices.Equal(got, []string{"alice"}) {
		t.Fatalf("deploy reached the upstream as %v; want once, as alice", got)
	}
	whoami := up.runs("whoami")
	count := map[string]int{}
	for _, w := range whoami {
		count[w]++
	}
	if count["alice"] != 1 || count["bob"] != 3 || len(whoami) != 4 {
		t.Fatalf("whoami ran as %v; want alice once (her first call), bob three times (first call, held call, its re-run)", whoami)
	}
	for _, a := range append(up.actorsOf("whoami"), up.actorsOf("deploy")...) {
		if a != "airlock" {
			t.Fatalf("a call reached the upstream with actor %q; want airlock", a)
		}
	}
	ah, bh := historyOf(t, c, tasks["alice"]), historyOf(t, c, tasks["bob"])
	for _, want := range []string{`"Tool":"desk__deploy","Outcome":"unknown"`, "stopped mid-call", "not re-run because the tool is not idempotent", "alice@corp"} {
		if !strings.Contains(ah, want) {
			t.Errorf("alice's history does not say %q", want)
		}
	}
	if strings.Contains(ah, `"Subject":"bob"`) || strings.Contains(bh, `"Subject":"alice"`) || strings.Contains(bh, "alice@corp") {
		t.Errorf("a task's history names the other user")
	}
	if out := p2.output(); !strings.Contains(out, "ended an activity the previous airlock process was running") {
		t.Errorf("the restarted process did not log the calls it ended:\n%s", out)
	}
	p.mu.Lock()
	secrets := append([]string{"exchange-secret"}, p.exchanged...)
	p.mu.Unlock()
	for _, tok := range toks {
		secrets = append(secrets, tok)
	}
	up.mu.Lock()
	secrets = append(secrets, up.seen...)
	up.mu.Unlock()
	places := map[string]string{"alice's history": ah, "bob's history": bh, "the killed dev's output": p1.output(), "the restarted dev's output": p2.output()}
	if !strings.Contains(p2.output(), `"tool":"desk__whoami"`) && !strings.Contains(p2.output(), "desk__whoami") {
		t.Fatalf("the restarted dev's output holds no audit line of the call: nothing to search")
	}
	for where, text := range places {
		for _, sec := range secrets {
			for _, part := range strings.Split(sec, ".") {
				if len(part) >= 16 && strings.Contains(text, part) {
					t.Fatalf("%s holds token material (%.12s…)", where, part)
				}
			}
		}
	}
}
