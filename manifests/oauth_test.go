package manifests_test

import (
	"strings"
	"testing"

	"github.com/airlock-run/airlock/manifests"
)

const ccTool = `tools:
  read:
    side_effects: [read]
    data_access_level: internal
    risk: low
`

// TestClientCredentialsBlock: server.http.oauth loads, expands ${VAR}s,
// and each mistake is reported at its line.
func TestClientCredentialsBlock(t *testing.T) {
	t.Setenv("TICKETS_HOST", "tickets.example.com")
	m, err := manifests.Parse("m.yaml", []byte(`server:
  name: tickets
  http:
    url: https://${TICKETS_HOST}/mcp
    oauth:
      token_url: https://login.example.com/token
      client_id: airlock
      client_secret_env: TICKETS_SECRET
      scopes: [tickets.write]
      resource: https://${TICKETS_HOST}/mcp
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	s := m.Server.Expand(nil)
	if o := s.HTTP.OAuth; o == nil || o.Resource != "https://tickets.example.com/mcp" || o.ClientSecretEnv != "TICKETS_SECRET" {
		t.Fatalf("expanded oauth %+v", o)
	}

	if ps := m.Validate(); len(ps) > 0 {
		t.Fatalf("valid block: %v", ps)
	}
	m, err = manifests.Parse("m.yaml", []byte(`server:
  name: tickets
  http:
    url: https://tickets.example.com/mcp
    headers: {Authorization: "Bearer ${X}"}
    oauth:
      token_url: /token
      client_secret_env: "the secret"
      scopes: ["a b"]
`+ccTool))
	if err != nil {
		t.Fatal(err)
	}
	got := manifests.Problems(m.Validate()).Error()
	for _, want := range []string{
		`m.yaml:7: server.http.oauth.token_url: "/token" is not an http(s) URL`,
		"server.http.oauth.client_id: is required",
		`m.yaml:8: server.http.oauth.client_secret_env: "the secret" is not an environment variable name`,
		`server.http.oauth.scopes[0]: "a b" is not a scope`,
		"server.http.headers.Authorization: sets Authorization, which server.http.oauth sets too",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q; got:\n%s", want, got)
		}
	}
}
