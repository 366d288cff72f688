// Package wasmmem holds what airlock's two wazero hosts (internal/sandbox,
// which runs native tools, and internal/program, which runs the program
// interpreter) need to bound a guest's memory: an Allocator that enforces
// a cap per instance, MinPages, which reads the memory a module asks for
// before it is instantiated, and MergeData, which coalesces a Go module's
// tens of thousands of data segments so that instantiating it is cheap.
//
// A wazero Runtime has one memory limit for every module it runs, and a
// Runtime per limit would compile each module once per limit; so both
// hosts keep one Runtime allowing the most a wasm32 memory can hold
// (MaxPages) and give each instance an Allocator of its own cap. Where the
// OS allows, the Allocator maps that memory outside the Go heap, so that
// it goes back to the OS as soon as the guest is done with it.
//
// Image and PrepareReactor serve the sandbox's reactor snapshots: an
// instance's memory that starts as a copy-on-write mapping of another's.
//
// wasmmem imports only wazero, the standard library and, on Linux,
// golang.org/x/sys/unix (memfd_create, its seals, and mmap at an address,
// which package syscall lacks on amd64).
package wasmmem

const (
	// PageSize is the size of a wasm memory page.
	PageSize = 64 << 10
	// MaxPages is the most pages a wasm32 memory can have: it addresses
	// 4 GiB at most.
	MaxPages = 1 << 16
)
