// Command notes is notes.wasm, a native airlock tool module keeping text
// notes in the directory mounted at /notes, with tools chosen by argv[1]:
// write, read and delete. Build it for WASI (see package wasm); the logic
// and its tests are in package notebook.
package main

import (
	"os"

	"github.com/airlock-run/airlock/wasm/internal/guest"
	"github.com/airlock-run/airlock/wasm/notes/notebook"
)

func main() {
	os.Exit(guest.Run(os.Args, os.Stdin, os.Stdout, os.Stderr, notebook.Tools(notebook.Root)))
}
