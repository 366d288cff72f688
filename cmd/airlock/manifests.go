package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlock-run/airlock/internal/config"
)

func manifestsCommand() *Command {
	return &Command{Name: "manifests",
		Short: "check manifests; accept changed upstream tool definitions; write a manifest skeleton for an upstream",
		Sub: []*Command{
			{Name: "validate", Usage: "[--config airlock.yaml] [MANIFEST.yaml ...]", Short: "check the configuration and its manifests",
				Long: validateLong, Flags: bind(validateFlags, runValidate)},
			pinCommand(),
			scanCommand(),
		}}
}

const validateLong = `Checks the configuration and every manifest it names (or only the files
given) and prints each problem as file:line: field: what is wrong and how to
fix it. Exits 1 if there is any problem.`

type validateOptions struct{ config string }

func validateFlags(fs *flag.FlagSet, o *validateOptions) {
	fs.StringVar(&o.config, "config", defaultConfig, "configuration `file` whose manifests to check (ignored when files are given)")
}

func runValidate(c *Call, o *validateOptions) int {
	if len(c.Args) == 0 {
		if _, err := os.Stat(o.config); errors.Is(err, os.ErrNotExist) {
			abs, _ := filepath.Abs(o.config)
			return c.fail(fmt.Errorf("%v (or name manifest files to check only those)", configMissing(o.config, abs)))
		}
	}
	return config.ValidateCommand(o.config, c.Args, c.Stdout, c.Stderr)
}
