//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package testenv

// lockFile does nothing where flock(2) is missing: the install is then
// serialised within a test process only, so run npm ci before the tests
// there (as .ci/run does).
func lockFile(string) (unlock func(), err error) { return func() {}, nil }
