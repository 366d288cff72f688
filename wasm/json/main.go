// Command json is json.wasm, a native airlock tool module serving two
// read-only tools chosen by argv[1]: query (select values from JSON by
// path) and csv_to_json. Build it for WASI (see package wasm): it is a
// reactor of the sandbox's snapshot ABI (-buildmode=c-shared), whose calls
// are airlock_run; the logic and its tests are in package jsontool.
package main

import (
	"os"

	"github.com/airlock-run/airlock/wasm/internal/guest"
	"github.com/airlock-run/airlock/wasm/json/jsontool"
)

// main is not run in a reactor; it serves one call when built as a
// command.
func main() { os.Exit(int(run())) }

// run is one call, in an instance made from the state _initialize left.
//
//go:wasmexport airlock_run
func run() int32 {
	return int32(guest.Run(os.Args, os.Stdin, os.Stdout, os.Stderr, jsontool.Tools()))
}

// Done in _initialize, so kept in the snapshot every call starts from.
func init() { guest.Warm() }
