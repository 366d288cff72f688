package wasm

import _ "embed"

// Program is airlock's program interpreter (code mode, issue 27): the
// Starlark guest built from ./program, which internal/program runs on
// wazero, one fresh instance per program, with a hard memory cap. It is
// embedded rather than read from disk, so a worker runs exactly the
// module it was built with; what a program observes depends on it, so a
// new module is a workflow change (see ProgramSHA256).
//
//go:embed program.wasm
var Program []byte

// ProgramSHA256 is Program's SHA-256 (hex). go test ./wasm fails when it
// is not the committed module's; after rebuilding the module (task wasm)
// pin it again with go test ./wasm -run TestEmbeddedPins -update.
const ProgramSHA256 = "9d19e10f3084fd8b24d0e9cf2ed17e0343f7bbcb0fc1c65dcc4f2ffef7896042"
