//go:build race

package bwrap

// raceDetector: the race runtime maps terabytes of shadow memory, which
// RLIMIT_DATA counts; tests that run this binary in a sandbox lift the
// memory bound under it (as internal/upstream's do).
const raceDetector = true
