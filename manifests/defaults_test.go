package manifests_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
)

func d(s string) manifests.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return manifests.Duration(v)
}

func TestEffectiveTimeout(t *testing.T) {
	var nilTool *manifests.Tool
	tests := []struct {
		tool *manifests.Tool
		want time.Duration
	}{
		{nilTool, 60 * time.Second},
		{&manifests.Tool{}, 60 * time.Second},
		{&manifests.Tool{Timeout: d("5m")}, 5 * time.Minute},
	}
	for _, tt := range tests {
		if got := tt.tool.EffectiveTimeout(); got != tt.want {
			t.Errorf("EffectiveTimeout(%+v) = %s, want %s", tt.tool, got, tt.want)
		}
	}
}

func TestDefaultHeartbeatTimeout(t *testing.T) {
	tests := []struct {
		timeout, want time.Duration
	}{
		{time.Second, 5 * time.Second}, // floor (the call's own timeout is then the sooner)
		{6 * time.Second, 5 * time.Second},
		{15 * time.Second, 5 * time.Second},
		{21 * time.Second, 7 * time.Second},
		{30 * time.Second, 10 * time.Second},
		{manifests.DefaultToolTimeout, 10 * time.Second}, // as before the setting existed
		{24 * time.Hour, 10 * time.Second},
	}
	for _, tt := range tests {
		if got := manifests.DefaultHeartbeatTimeout(tt.timeout); got != tt.want {
			t.Errorf("DefaultHeartbeatTimeout(%s) = %s, want %s", tt.timeout, got, tt.want)
		}
	}
}

func TestEffectiveHeartbeatTimeout(t *testing.T) {
	var nilTool *manifests.Tool
	tests := []struct {
		name string
		tool *manifests.Tool
		want time.Duration
	}{
		{"no tool", nilTool, 10 * time.Second},
		{"defaults", &manifests.Tool{}, 10 * time.Second},
		{"derived from a short timeout", &manifests.Tool{Timeout: d("18s")}, 6 * time.Second},
		{"declared", &manifests.Tool{Timeout: d("1h"), HeartbeatTimeout: d("30s")}, 30 * time.Second},
		{"declared below the default's floor", &manifests.Tool{Timeout: d("10s"), HeartbeatTimeout: d("2s")}, 2 * time.Second},
	}
	for _, tt := range tests {
		if got := tt.tool.EffectiveHeartbeatTimeout(); got != tt.want {
			t.Errorf("%s: EffectiveHeartbeatTimeout = %s, want %s", tt.name, got, tt.want)
		}
	}
}

func TestEffectiveRetry(t *testing.T) {
	def := manifests.Retry{MaxAttempts: 3, InitialInterval: d("1s"), Backoff: 2, MaxInterval: d("30s")}
	tests := []struct {
		name  string
		retry *manifests.Retry
		want  manifests.Retry
	}{
		{"none", nil, def},
		{"empty", &manifests.Retry{}, def},
		{"no retries", &manifests.Retry{MaxAttempts: 1}, manifests.Retry{MaxAttempts: 1, InitialInterval: d("1s"), Backoff: 2, MaxInterval: d("30s")}},
		{"all set", &manifests.Retry{MaxAttempts: 5, InitialInterval: d("2s"), Backoff: 1.5, MaxInterval: d("1m"), NonRetryable: []string{"Denied"}},
			manifests.Retry{MaxAttempts: 5, InitialInterval: d("2s"), Backoff: 1.5, MaxInterval: d("1m"), NonRetryable: []string{"Denied"}}},
		{"initial above default cap raises the cap", &manifests.Retry{InitialInterval: d("1m")},
			manifests.Retry{MaxAttempts: 3, InitialInterval: d("1m"), Backoff: 2, MaxInterval: d("1m")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := (&manifests.Tool{Retry: tt.retry}).EffectiveRetry()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("EffectiveRetry (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApprovalDefaults(t *testing.T) {
	var none *manifests.Approval
	if none.EffectiveQuorum() != 1 || none.EffectiveOnTimeout() != "deny" {
		t.Errorf("nil approval: quorum %d, on timeout %q; want 1, deny", none.EffectiveQuorum(), none.EffectiveOnTimeout())
	}
	a := &manifests.Approval{Quorum: 2, OnTimeout: "approve"}
	if a.EffectiveQuorum() != 2 || a.EffectiveOnTimeout() != "approve" {
		t.Errorf("declared approval: quorum %d, on timeout %q; want 2, approve", a.EffectiveQuorum(), a.EffectiveOnTimeout())
	}
	if got := (manifests.Server{}).EffectiveConnectTimeout(); got != 30*time.Second {
		t.Errorf("EffectiveConnectTimeout = %s, want 30s", got)
	}
}

func TestExpand(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_FROM_ENV", "env")
	t.Setenv("AIRLOCK_TEST_SHADOWED", "env")
	in := manifests.Server{
		Name: "s",
		Stdio: &manifests.StdioServer{
			Command: "${BIN}",
			Args:    []string{"${DATA}/sandbox", "$HOME", "$${LITERAL}", "${AIRLOCK_TEST_FROM_ENV}", "${AIRLOCK_TEST_UNDEFINED}x", "${unterminated"},
			Env:     map[string]string{"FILE": "${DATA}/m.jsonl", "S": "${AIRLOCK_TEST_SHADOWED}"},
			Dir:     "${DATA}",
		},
		HTTP: &manifests.HTTPServer{
			URL:     "https://${HOST}/mcp",
			Headers: map[string]string{"Authorization": "Bearer ${AIRLOCK_TEST_FROM_ENV}"},
		},
	}
	orig := manifests.Server{
		Name:  in.Name,
		Stdio: &manifests.StdioServer{Command: in.Stdio.Command, Args: append([]string(nil), in.Stdio.Args...), Env: map[string]string{"FILE": "${DATA}/m.jsonl", "S": "${AIRLOCK_TEST_SHADOWED}"}, Dir: in.Stdio.Dir},
		HTTP:  &manifests.HTTPServer{URL: in.HTTP.URL, Headers: map[string]string{"Authorization": "Bearer ${AIRLOCK_TEST_FROM_ENV}"}},
	}
	vars := map[string]string{"BIN": "npx", "DATA": "/var/airlock", "HOST": "h.example", "AIRLOCK_TEST_SHADOWED": "vars"}

	got := in.Expand(vars)
	want := manifests.Server{
		Name: "s",
		Stdio: &manifests.StdioServer{
			Command: "npx",
			Args:    []string{"/var/airlock/sandbox", "$HOME", "${LITERAL}", "env", "x", "${unterminated"},
			Env:     map[string]string{"FILE": "/var/airlock/m.jsonl", "S": "vars"},
			Dir:     "/var/airlock",
		},
		HTTP: &manifests.HTTPServer{URL: "https://h.example/mcp", Headers: map[string]string{"Authorization": "Bearer env"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Expand (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(orig, in); diff != "" {
		t.Errorf("Expand changed its receiver (-before +after):\n%s", diff)
	}
}
