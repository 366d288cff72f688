package program

import (
	"math/rand/v2"

	"github.com/tetratelabs/wazero"
)

// The guest's environment is the same for every instance, so that a
// program replayed on another worker, at another time, observes exactly
// what it observed the first time: the wall clock and the monotonic clock
// are counters that advance a fixed step at each read (from a fixed
// epoch), random bytes come from a generator with a fixed seed, there is
// no filesystem, no environment variable and no argument but the
// program's name, and sleeping returns at once. Nothing the guest sees
// depends on the host, the time or the order of instances.
const (
	// fakeEpoch is 2000-01-01T00:00:00Z in nanoseconds.
	fakeEpoch = 946684800 * int64(1e9)
	// clockStep is how far either clock advances per read: enough that
	// a Go runtime measuring durations sees time pass.
	clockStep = int64(1e6)
	// guestName is the guest's argv[0].
	guestName = "program"
)

// randSeed seeds every instance's random source.
var randSeed = [32]byte([]byte("airlock program: fixed rand seed"))

// moduleConfig is a fresh instance's configuration, with its own clocks
// and random source (each starts where every other instance's started).
func moduleConfig(stderr *capWriter) wazero.ModuleConfig {
	wall, mono := fakeEpoch, int64(0)
	return wazero.NewModuleConfig().
		WithName(""). // names must be unique per runtime; "" lets instances run concurrently
		WithArgs(guestName).
		WithStderr(stderr).
		// Run calls _start itself, so that a failure to instantiate (an
		// infrastructure error) is told apart from the guest's death.
		WithStartFunctions().
		WithWalltime(func() (int64, int32) {
			wall += clockStep
			return wall / 1e9, int32(wall % 1e9)
		}, 1).
		WithNanotime(func() int64 {
			mono += clockStep
			return mono
		}, 1).
		WithNanosleep(func(int64) {}).
		WithRandSource(rand.NewChaCha8(randSeed))
}
