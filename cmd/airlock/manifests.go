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
  airlock manifests pin      [--config airlock.yaml] SERVER [TOOL]
  airlock manifests scan     [--config airlock.yaml] [--out FILE] SERVER
  airlock manifests scan     --name NAME --command "npx -y PKG" | --url URL

validate checks the configuration and every manifest it names (or only the
files given) and prints each problem as file:line: field: what is wrong and
how to fix it. Exits 1 if there is any problem.

pin shows how an upstream's tool definitions differ from their pins and
accepts the current ones (a changed tool is blocked until then).

scan lists an upstream's tools and writes a manifest skeleton to review.

Run "airlock manifests pin -h" or "airlock manifests scan -h" for more.
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
	case "pin":
		return runPin(args[1:], stdout, stderr)
	case "scan":
		return runScan(args[1:], stdout, stderr)
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
