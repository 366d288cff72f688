// Command notes is notes.wasm, a native airlock tool module keeping text
// notes in the directory mounted at /notes, with tools chosen by argv[1]:
// write, read and delete. Build it for WASI (see package wasm): it is a
// reactor of the sandbox's snapshot ABI (-buildmode=c-shared), whose calls
// are airlock_run; the logic and its tests are in package notebook.
package main

import (
	"os"

	"github.com/airlock-run/airlock/wasm/internal/guest"
	"github.com/airlock-run/airlock/wasm/notes/notebook"
)

// main is not run in a reactor; it serves one call when built as a
// command.
func main() { os.Exit(int(run())) }

// run is one call, in an instance made from the state _initialize left.
//
//go:wasmexport airlock_run
func run() int32 {
	return int32(guest.Run(os.Args, os.Stdin, os.Stdout, os.Stderr, notebook.Tools(notebook.Root)))
}

// Done in _initialize, so kept in the snapshot every call starts from.
func init() { guest.Warm() }
