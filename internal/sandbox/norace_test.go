//go:build !race

package sandbox

// slowdown scales the upper bounds the tests put on how long a guest
// runs (see race_test.go).
const slowdown = 1
