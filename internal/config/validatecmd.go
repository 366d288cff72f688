package config

import (
	"errors"
	"fmt"
	"io"

	"github.com/airlock-run/airlock/manifests"
)

// ValidateCommand implements `airlock manifests validate [--config FILE]
// [FILE...]`. With manifest files it validates exactly those (the
// configuration is not read); without, it loads the configuration
// (airlock.yaml when configPath is empty) and every manifest it names. It
// prints every problem, one per line, to stderr and returns 1, or prints
// "ok: N manifests, M tools" to stdout and returns 0. It lives here rather
// than in package manifests because it needs the configuration loader.
func ValidateCommand(configPath string, manifestPaths []string, stdout, stderr io.Writer) int {
	var (
		ms  []*manifests.Manifest
		err error
	)
	if len(manifestPaths) > 0 {
		ms, err = manifests.LoadFiles(manifestPaths)
	} else {
		if configPath == "" {
			configPath = "airlock.yaml"
		}
		var snap *Snapshot
		if snap, err = Load(configPath); err == nil {
			ms = snap.Manifests
		}
	}
	if err != nil {
		var ps manifests.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				fmt.Fprintln(stderr, p.Error())
			}
		} else {
			fmt.Fprintln(stderr, err)
		}
		return 1
	}
	tools := 0
	for _, m := range ms {
		tools += len(m.Tools)
	}
	fmt.Fprintf(stdout, "ok: %d manifests, %d tools\n", len(ms), tools)
	return 0
}
