//go:build race

package sandbox

// slowdown scales the upper bounds the tests put on how long a guest
// runs: under the race detector every memory access of the runtime is
// instrumented, and a guest that touches 64 MiB takes several times as
// long.
const slowdown = 6
