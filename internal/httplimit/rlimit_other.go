//go:build !(linux || darwin)

package httplimit

import "errors"

// RaiseOpenFiles is not supported on this OS: it changes nothing and
// returns errors.ErrUnsupported.
func RaiseOpenFiles() (soft, hard uint64, err error) {
	return 0, 0, errors.ErrUnsupported
}
