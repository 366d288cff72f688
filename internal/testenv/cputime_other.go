//go:build !unix

package testenv

import "time"

// ProcessCPU is not measured outside unix; benchmarks then report wall time
// only.
func ProcessCPU() (time.Duration, bool) { return 0, false }
