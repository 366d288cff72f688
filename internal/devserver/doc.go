// Package devserver runs a single-process Temporal server inside airlock,
// persisted to a SQLite file in a data directory, so that `airlock dev`
// needs no external Temporal installation and survives kill -9 and restart.
//
// Start prepares the database (schema on first use, namespace with a long
// retention), takes an exclusive lock on the data directory, starts the four
// Temporal services on loopback ports, and registers the caller's search
// attributes. Stop shuts everything down and releases the lock.
// CreateNamespace adds a namespace configured like the first to the running
// server: the integration tests share one server, a namespace per test.
//
// This is the only package allowed to import go.temporal.io/server, which is
// large and slow to compile. Nothing in the project imports devserver except
// the commands under cmd/. Floor (floor.go) measures what a durable call
// costs on this server alone, for BenchmarkUpdateFloor and `airlock bench
// --floor`.
package devserver
