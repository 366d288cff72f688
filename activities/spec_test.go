package activities

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/manifests"
)

func TestSpecUncoveredToolIsConservative(t *testing.T) {
	got := SpecFor(nil)
	want := ToolSpec{
		Timeout:     time.Minute,
		Retry:       RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: 30 * time.Second, Backoff: 2},
		Idempotent:  false,
		SideEffects: []string{"write"},
		Risk:        "high",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("SpecFor(nil) (-want +got):\n%s", diff)
	}
}

func TestSpecFromManifest(t *testing.T) {
	for _, tc := range []struct {
		name string
		decl *manifests.Tool
		want ToolSpec
	}{
		{
			name: "defaults",
			decl: &manifests.Tool{SideEffects: []manifests.SideEffect{manifests.SideEffectRead}, DataAccessLevel: manifests.DataPublic, Risk: manifests.RiskLow},
			want: ToolSpec{
				Timeout:     manifests.DefaultToolTimeout,
				Retry:       RetrySpec{MaxAttempts: 3, InitialInterval: time.Second, MaxInterval: 30 * time.Second, Backoff: 2},
				SideEffects: []string{"read"},
				Risk:        "low",
			},
		},
		{
			name: "declared",
			decl: &manifests.Tool{
				SideEffects: []manifests.SideEffect{manifests.SideEffectWrite, manifests.SideEffectSend},
				Risk:        manifests.RiskCritical, Idempotent: true,
				Timeout: manifests.Duration(5 * time.Minute),
				Retry: &manifests.Retry{MaxAttempts: 7, InitialInterval: manifests.Duration(2 * time.Second),
					MaxInterval: manifests.Duration(time.Minute), Backoff: 1.5, NonRetryable: []string{"Rejected"}},
			},
			want: ToolSpec{
				Timeout: 5 * time.Minute,
				Retry: RetrySpec{MaxAttempts: 7, InitialInterval: 2 * time.Second, MaxInterval: time.Minute,
					Backoff: 1.5, NonRetryable: []string{"Rejected"}},
				Idempotent:  true,
				SideEffects: []string{"write", "send"},
				Risk:        "critical",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, SpecFor(tc.decl)); diff != "" {
				t.Fatalf("spec (-want +got):\n%s", diff)
			}
		})
	}
}
