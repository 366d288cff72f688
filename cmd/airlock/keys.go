package main

import (
	"fmt"
	"io"

	"github.com/airlock-run/airlock/internal/identity"
)

const keysUsage = `Usage:
  airlock keys new      make a random API key and print it with its SHA-256
  airlock keys hash KEY print the SHA-256 of an existing key

Give the key to the caller; put only the hash in the configuration
(principals[].api_key_sha256).
`

func runKeys(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, keysUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	switch args[0] {
	case "new":
		if len(args) != 1 {
			fmt.Fprint(stderr, "airlock keys new: takes no arguments\n")
			return 2
		}
		key, hash, err := identity.NewKey()
		if err != nil {
			fmt.Fprintf(stderr, "airlock keys new: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "key:    %s\nsha256: %s\n\nGive the key to the caller (Authorization: Bearer <key>); add the sha256 to\nprincipals[].api_key_sha256 in the configuration. The key is not stored anywhere.\n", key, hash)
		return 0
	case "hash":
		if len(args) != 2 || args[1] == "" {
			fmt.Fprint(stderr, "airlock keys hash: name one KEY\n")
			return 2
		}
		fmt.Fprintln(stdout, identity.HashKey(args[1]))
		return 0
	}
	fmt.Fprintf(stderr, "airlock keys: unknown subcommand %q\n%s", args[0], keysUsage)
	return 2
}
