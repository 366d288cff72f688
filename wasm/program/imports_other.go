//go:build !wasip1

package main

import "unsafe"

// Outside wasip1 there is no host: the command builds (so go vet ./...
// covers it) but does nothing useful.

func send(unsafe.Pointer, uint32) int32 { panic("program: runs only as wasip1 (see package wasm)") }

func recv(unsafe.Pointer, uint32) int32 { panic("program: runs only as wasip1 (see package wasm)") }
