// Command json is json.wasm, a native airlock tool module serving two
// read-only tools chosen by argv[1]: query (select values from JSON by
// path) and csv_to_json. Build it for WASI (see package wasm); the logic
// and its tests are in package jsontool.
package main

import (
	"os"

	"github.com/airlock-run/airlock/wasm/internal/guest"
	"github.com/airlock-run/airlock/wasm/json/jsontool"
)

func main() {
	os.Exit(guest.Run(os.Args, os.Stdin, os.Stdout, os.Stderr, jsontool.Tools()))
}
