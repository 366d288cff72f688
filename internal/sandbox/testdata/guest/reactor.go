//go:build airlock_reactor

package main

import "os"

// The reactor build of the guest, for the sandbox's snapshot ABI: the
// same modes, each call in an instance made from the state _initialize
// left. Build it (from the repository root) with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildvcs=false -tags airlock_reactor -buildmode=c-shared -trimpath -ldflags="-s -w" -o internal/sandbox/testdata/reactor/guest.wasm ./internal/sandbox/testdata/guest
//
// and update reactorSHA256 in sandbox_test.go.

// airlockRun is a call: what main does.
//
//go:wasmexport airlock_run
func airlockRun() int32 {
	main()
	return 0
}

// What a command does before it reads its call, a reactor does in
// _initialize: hog, the memory bomb that never reads its call, hoards
// there, as it does in a command's start.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "hog" {
		hog()
	}
}
