package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/manifests"
)

func testConfig() *config.Config {
	return &config.Config{
		LocalPrincipal: "alice",
		Principals: []config.Principal{
			{Name: "alice", Roles: []string{"dev", "ops"}, APIKeySHA256: []string{HashKey("alice-key")}, SlackUserID: "U1"},
			{Name: "bob", Roles: []string{"dev"}, APIKeySHA256: []string{HashKey("bob-key"), HashKey("bob-key-2")}},
		},
		Roles: map[string]*config.Role{
			"dev": {Permissions: []string{"fs.read"}, DataAccessLevel: manifests.DataInternal, Tools: []string{"fs__read_*"}, MaxCalls: 10},
			"ops": {Permissions: []string{"fs.read", "fs.write"}, DataAccessLevel: manifests.DataSensitive, Tools: []string{"fs__*"}, Deadline: manifests.Duration(time.Hour)},
		},
	}
}

func TestResolveRoles(t *testing.T) {
	d := New(testConfig())
	a, _ := d.Lookup("alice")
	want := &Principal{Name: "alice", Roles: []string{"dev", "ops"}, Permissions: []string{"fs.read", "fs.write"},
		DataLevel: manifests.DataSensitive, SlackUserID: "U1", AllowTools: []string{"fs__read_*", "fs__*"}, MaxCalls: 10, Deadline: time.Hour}
	if diff := cmp.Diff(want, a, cmpopts.IgnoreUnexported(Principal{})); diff != "" {
		t.Fatalf("alice (-want +got):\n%s", diff)
	}
	if l, err := d.Local(); err != nil || l.Name != "alice" {
		t.Fatalf("local: %v %v", l, err)
	}
	if _, err := New(&config.Config{}).Local(); err == nil || !strings.Contains(err.Error(), "local_principal") {
		t.Fatalf("missing local principal: %v", err)
	}
}

func TestBySlackUser(t *testing.T) {
	d := New(testConfig())
	if p, ok := d.BySlackUser("U1"); !ok || p.Name != "alice" {
		t.Fatalf("U1: %v %v, want alice", p, ok)
	}
	for _, id := range []string{"", "U2", "alice"} {
		if p, ok := d.BySlackUser(id); ok {
			t.Errorf("BySlackUser(%q) = %s, want none", id, p.Name)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	d := New(testConfig())
	tests := []struct {
		name    string
		header  http.Header
		want    string
		wantErr string
	}{
		{"bearer", http.Header{"Authorization": {"Bearer alice-key"}}, "alice", ""},
		{"bearer lowercase scheme", http.Header{"Authorization": {"bearer bob-key-2"}}, "bob", ""},
		{"x-api-key", http.Header{"X-Api-Key": {"bob-key"}}, "bob", ""},
		{"none", http.Header{}, "", "no API key"},
		{"unknown", http.Header{"Authorization": {"Bearer nope"}}, "", "not recognised"},
		{"basic", http.Header{"Authorization": {"Basic YTpi"}}, "", "not \"Bearer <key>\""},
		{"hash is not a key", http.Header{"Authorization": {"Bearer " + HashKey("alice-key")}}, "", "not recognised"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := d.Authenticate(tc.header)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || p.Name != tc.want {
				t.Fatalf("got %v, %v; want %s", p, err, tc.want)
			}
		})
	}
}

func TestNewKey(t *testing.T) {
	k1, h1, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	k2, _, _ := NewKey()
	if k1 == k2 || HashKey(k1) != h1 || len(h1) != 64 || !strings.HasPrefix(k1, "ak_") {
		t.Fatalf("keys %q %q hash %q", k1, k2, h1)
	}
}

// A reloaded configuration's principals answer through the directory the
// roles already hold: a new key authenticates, a removed one is refused.
func TestReplace(t *testing.T) {
	mk := func(name, key string) *Directory {
		return New(&config.Config{
			Roles:      map[string]*config.Role{"dev": {Permissions: []string{"fs.read"}, Tools: []string{"*"}}},
			Principals: []config.Principal{{Name: name, Roles: []string{"dev"}, APIKeySHA256: []string{HashKey(key)}}},
		})
	}
	d := mk("alice", "key-a")
	held := d // what the gateway holds
	if p, err := held.Authenticate(http.Header{"Authorization": {"Bearer key-a"}}); err != nil || p.Name != "alice" {
		t.Fatalf("before: %v %v", p, err)
	}
	d.Replace(mk("bob", "key-b"))
	if _, err := held.Authenticate(http.Header{"Authorization": {"Bearer key-a"}}); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("removed key: err %v, want ErrUnknownKey", err)
	}
	if p, err := held.Authenticate(http.Header{"Authorization": {"Bearer key-b"}}); err != nil || p.Name != "bob" {
		t.Fatalf("new key: %v %v", p, err)
	}
	if _, ok := held.Lookup("alice"); ok {
		t.Fatal("alice still looked up after the reload")
	}
}

// TestSubjectTokenNotPrinted: the access token a principal keeps for token
// exchange is not in its JSON nor in any fmt form of it.
func TestSubjectTokenNotPrinted(t *testing.T) {
	p := &Principal{Name: "alice@corp", bearer: &bearerToken{raw: "secret-access-token"}}
	if p.SubjectToken() != "secret-access-token" || (&Principal{}).SubjectToken() != "" || (*Principal)(nil).SubjectToken() != "" {
		t.Fatal("SubjectToken")
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{string(raw), fmt.Sprintf("%v", p), fmt.Sprintf("%+v", p), fmt.Sprintf("%#v", p), fmt.Sprintf("%+v", *p), fmt.Sprint([]*Principal{p})} {
		if strings.Contains(s, "secret-access-token") {
			t.Fatalf("printed: %s", s)
		}
	}
}
