package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/airlock-run/airlock/internal/config"
)

const manifestsUsage = `Usage:
  airlock manifests validate [--config airlock.yaml] [MANIFEST.yaml ...]

Checks the configuration and every manifest it names (or only the files
given) and prints each problem as file:line: field: what is wrong and how to
fix it. Exits 1 if there is any problem.
`

func runManifests(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, manifestsUsage)
		return 2
	}
	switch args[0] {
	case "validate":
		fs := flag.NewFlagSet("airlock manifests validate", flag.ContinueOnError)
		fs.SetOutput(stderr)
		cfg := fs.String("config", "airlock.yaml", "configuration `file` whose manifests to check (ignored when files are given)")
		fs.Usage = func() { fmt.Fprint(stderr, manifestsUsage); fs.PrintDefaults() }
		if err := fs.Parse(args[1:]); err != nil {
			return 2
		}
		return config.ValidateCommand(*cfg, fs.Args(), stdout, stderr)
	}
	fmt.Fprintf(stderr, "airlock manifests: unknown subcommand %q\n%s", args[0], manifestsUsage)
	return 2
}
