//go:build race

package upstream

// raceDetector: the race runtime maps terabytes of shadow memory, which
// RLIMIT_DATA counts, so a race-instrumented test server cannot run under
// a memory bound; the sandbox tests lift it (see TestSandboxAttacks).
const raceDetector = true
