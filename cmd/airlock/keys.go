package main

import (
	"fmt"

	"github.com/airlock-run/airlock/internal/exchange"
	"github.com/airlock-run/airlock/internal/identity"
)

const keysLong = `Give the key to the caller; put only the hash in the configuration
(principals[].api_key_sha256).`

func keysCommand() *Command {
	return &Command{Name: "keys", Short: "make API keys for principals", Long: keysLong,
		Sub: []*Command{
			{Name: "new", Short: "make a random API key and print it with its SHA-256", Long: keysLong, Flags: bind(nil, keysNew)},
			{Name: "hash", Usage: "KEY", Short: "print the SHA-256 of an existing key", Long: keysLong, Flags: bind(nil, keysHash)},
			{Name: "subject", Short: "make the worker's subject key (upstreams that act as the user)", Long: subjectKeyLong, Flags: bind(nil, keysSubject)},
		}}
}

func keysNew(c *Call, _ *noFlags) int {
	if len(c.Args) != 0 {
		return c.usage("takes no arguments")
	}
	key, hash, err := identity.NewKey()
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.Stdout, "key:    %s\nsha256: %s\n\nGive the key to the caller (Authorization: Bearer <key>); add the sha256 to\nprincipals[].api_key_sha256 in the configuration. The key is not stored anywhere.\n", key, hash)
	return 0
}

func keysHash(c *Call, _ *noFlags) int {
	if len(c.Args) != 1 || c.Args[0] == "" {
		return c.usage("name one KEY")
	}
	fmt.Fprintln(c.Stdout, identity.HashKey(c.Args[0]))
	return 0
}

const subjectKeyLong = `The gateway seals each caller's access token to the worker's subject
key for upstreams with server.http.auth.token_exchange; only a worker with
the private half opens it. Set the private key on every worker (and on a
gateway that runs in the same process); a gateway alone needs the public one.`

func keysSubject(c *Call, _ *noFlags) int {
	if len(c.Args) != 0 {
		return c.usage("takes no arguments")
	}
	k, err := exchange.NewKey()
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.Stdout, "%s=%s\n%s=%s\nkey id: %s\n\nSet the first on every worker (keep it secret, like a signing key); the second\non gateways that run without a worker.\n",
		exchange.EnvKey, exchange.EncodeKey(k.Bytes()), exchange.EnvPublicKey, exchange.EncodeKey(k.PublicKey().Bytes()), exchange.KeyID(k.PublicKey()))
	return 0
}
