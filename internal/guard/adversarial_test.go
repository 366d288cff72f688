package guard

import (
	"strings"
	"testing"
	"time"
)

// TestAdversarialInputs: 1 MiB built to make a scanner quadratic (every
// anchor repeated, PEM headers without END) is scanned in linear time.
func TestAdversarialInputs(t *testing.T) {
	for _, unit := range []string{
		"eyJ", ".eyJ", "eyJ" + strings.Repeat("a", 12) + ".", "AKIA", " AKIA", " ghp_", "xoxb-1234567-",
		"-----BEGIN RSA PRIVATE KEY-----\nAAAA\n", "-----BEGIN RSA PRIVATE KEY-----", "secret_key=", "PRIVATE KEY ",
	} {
		s := strings.Repeat(unit, (1<<20)/len(unit))
		start := time.Now()
		ms := Scan(s)
		took := time.Since(start)
		t.Logf("%q ×%d: %d matches in %v", unit, len(s)/len(unit), len(ms), took)
		// Linear scans take well under a second here; a quadratic one
		// (how each of these was found) takes minutes. The bound is wide
		// for a loaded machine.
		if took > 10*time.Second {
			t.Errorf("%q ×%d took %v: not linear", unit, len(s)/len(unit), took)
		}
	}
}
