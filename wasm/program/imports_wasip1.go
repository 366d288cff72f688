//go:build wasip1

package main

import "unsafe"

// The host's functions (see package wire).

//go:wasmimport airlock send
func send(ptr unsafe.Pointer, n uint32) int32

//go:wasmimport airlock recv
func recv(ptr unsafe.Pointer, capacity uint32) int32
