//go:build !race

package bwrap

// relayDataHeadroom is what the forwarder may map beyond what it has
// mapped once started: its buffers (32 KiB a direction a connection)
// and the Go runtime's growth.
const relayDataHeadroom = 64 << 20
