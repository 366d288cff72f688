package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/airlock-run/airlock/internal/config"
)

const manifestsUsage = `Usage:
  airlock manifests validate [--config airlock.yaml] [MANIFEST.yaml ...]

Checks the configuration and every manifest it names (or only the files
given) and prints each problem as file:line: field: what is wrong and how to
fix it. Exits 1 if there is any problem.
`

func runManifests(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, manifestsUsage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, manifestsUsage)
		return 0
	}
	switch args[0] {
	case "validate":
		fs := flag.NewFlagSet("airlock manifests validate", flag.ContinueOnError)
		fs.SetOutput(stderr)
		cfg := fs.String("config", defaultConfig, "configuration `file` whose manifests to check (ignored when files are given)")
		fs.Usage = func() { fmt.Fprint(stderr, manifestsUsage); fs.PrintDefaults() }
		if err := fs.Parse(args[1:]); err != nil {
			return parseExit(err)
		}
		if fs.NArg() == 0 {
			if _, err := os.Stat(*cfg); errors.Is(err, os.ErrNotExist) {
				abs, _ := filepath.Abs(*cfg)
				fmt.Fprintf(stderr, "airlock manifests validate: %v (or name manifest files to check only those)\n", configMissing(*cfg, abs))
				return 1
			}
		}
		return config.ValidateCommand(*cfg, fs.Args(), stdout, stderr)
	}
	fmt.Fprintf(stderr, "airlock manifests: unknown subcommand %q\n%s", args[0], manifestsUsage)
	return 2
}
