//go:build race

package bwrap

// The race runtime maps shadow and trace memory for every goroutine, which
// RLIMIT_DATA counts: the forwarder of a race-instrumented binary (tests)
// gets far more headroom.
const relayDataHeadroom = 16 << 30
