package main

import (
	"flag"
	"fmt"

	"github.com/airlock-run/airlock/worker"
)

// registerVersioning adds the worker's build identity flags: every worker
// reports its Worker Deployment Version (deployment name + build ID, the
// build ID being airlock's version) so Temporal's worker versioning can
// route; --versioning opts the worker into it (see deploy/README.md,
// "Rolling upgrades").
func (f *commonFlags) registerVersioning(fs *flag.FlagSet) {
	fs.StringVar(&f.buildID, "build-id", "", "the worker's build `ID` for Temporal worker versioning (default: airlock's version, \"airlock version\")")
	fs.StringVar(&f.deployment, "deployment", worker.DefaultDeploymentName, "Temporal Worker Deployment `name` this worker belongs to")
	fs.StringVar(&f.versioning, "versioning", worker.VersioningOff,
		fmt.Sprintf("Temporal worker versioning: %s (report the build ID only), %s (tasks move to the current version's workers at their next step; workflow changes must be behind GetVersion, as airlock's are) or %s (tasks stay on the build that started them)",
			worker.VersioningOff, worker.VersioningAutoUpgrade, worker.VersioningPinned))
}

// buildID is the worker's build ID: --build-id, else airlock's version.
func (e *env) buildID() string { return firstNonEmpty(e.flags.buildID, version) }

// checkVersioning refuses a --versioning that would route badly: an
// unknown mode, or versioning on with a build ID that does not tell builds
// apart ("dev", what a build without -ldflags reports).
func checkVersioning(e *env) error {
	switch e.flags.versioning {
	case "", worker.VersioningOff:
		return nil
	case worker.VersioningAutoUpgrade, worker.VersioningPinned:
	default:
		return fmt.Errorf("--versioning %q: use %s, %s or %s", e.flags.versioning, worker.VersioningOff, worker.VersioningAutoUpgrade, worker.VersioningPinned)
	}
	if id := e.buildID(); id == "" || id == "dev" {
		return fmt.Errorf("--versioning %s needs a build ID that differs between builds, not %q: build with -ldflags \"-X main.version=VERSION\" (deploy/Dockerfile does) or pass --build-id", e.flags.versioning, id)
	}
	if e.flags.deployment == "" {
		return fmt.Errorf("--deployment is empty: name the Worker Deployment (default %q)", worker.DefaultDeploymentName)
	}
	return nil
}
