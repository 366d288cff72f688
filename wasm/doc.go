// Package wasm holds airlock's WASI command modules (GOOS=wasip1
// GOARCH=wasm): the native tools, which airlock runs in its wazero sandbox
// instead of calling an upstream MCP server (manifests/examples/native.yaml
// declares them), and the program interpreter of code mode, which the
// package embeds (Program) for internal/program.
//
// Each module is a main package here, with its logic in an importable
// package beside it that is tested natively (go test ./wasm/...):
//
//	json/   json.wasm: query (select from JSON by path), csv_to_json
//	        (logic: json/jsontool)
//	notes/  notes.wasm: write, read, delete text notes in the /notes mount
//	        (logic: notes/notebook)
//	internal/guest  the protocol, shared by the tools: arguments as JSON
//	        on stdin, an MCP CallToolResult on stdout, a one-line error on
//	        stderr with a non-zero exit, the tool chosen by argv[1]
//	program/  program.wasm: the Starlark program interpreter, speaking
//	        the host protocol of program/wire over the host module
//	        "airlock" (logic: program/engine)
//
// Modules import only the standard library and each other's packages
// under wasm/, and the interpreter also go.starlark.net. Outside wasm/,
// internal/program runs Program and the workflows speak program/wire.
//
// # Rebuilding
//
// The built modules are committed. The manifest pins each tool module by
// its SHA-256: airlock refuses a module whose hash differs, so a module
// runs only as reviewed. ProgramSHA256 pins program.wasm likewise. After
// changing a module's source, rebuild and re-pin with
//
//	go run github.com/go-task/task/v3/cmd/task@v3.54.0 wasm
//
// which builds each tool module as a reactor of internal/sandbox's
// snapshot ABI (each call an airlock_run in an instance made from the
// state _initialize left; see internal/sandbox/reactor.go)
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -buildvcs=false -trimpath -ldflags="-s -w" -o wasm/json.wasm ./wasm/json
//
// and program.wasm, which internal/program runs, as a command (no
// -buildmode),
// and then writes the new hashes into manifests/examples/native.yaml and
// wasm/program_module.go (go test ./wasm -run
// 'TestModuleHashes|TestEmbeddedPins' -update). Commit the modules with
// their pins.
//
// -trimpath and -buildvcs=false make the build reproducible: they leave
// out local paths and the commit (which would change with every commit of
// the module itself); -s -w drops the symbol and debug tables. go test
// ./wasm fails
// when a committed module's hash is not the one pinned, and
// (without -short, with the Go release that built the modules) when a
// fresh build differs from the committed module: the source changed and
// the module was not rebuilt.
package wasm
