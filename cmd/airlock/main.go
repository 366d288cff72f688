// Command airlock is the one binary of airlock: `dev` runs everything in one
// process on an embedded Temporal server; `gateway`, `worker` and
// `approver` run the roles separately against a Temporal cluster; the other
// subcommands are for operators. The command line is the table in
// commands.go; each command's flags and run are in the file named for it.
package main

import "os"

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
