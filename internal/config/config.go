// Package config loads airlock's configuration file (airlock.yaml) and the
// manifest files it names, and validates them together into one snapshot
// (Load). It also implements `airlock manifests validate` (ValidateCommand),
// which needs both.
//
// It reads files only; it never logs and never dials anything. It imports
// only package manifests and the standard library.
package config

import "github.com/airlock-run/airlock/manifests"

// Config is the airlock configuration file.
type Config struct {
	// File is the path the configuration was loaded from (set by the loader).
	File string `yaml:"-"`

	// DataDir holds the embedded Temporal database and other local state.
	// Relative paths are relative to the current directory. Default ".airlock".
	DataDir string `yaml:"data_dir,omitempty"`

	// Listen is the gateway's HTTP address. Default "127.0.0.1:7400".
	Listen string `yaml:"listen,omitempty"`

	// Manifests lists manifest files or globs, relative to the config file.
	Manifests []string `yaml:"manifests"`

	// ExposeUncovered exposes upstream tools that no manifest declares, with
	// conservative defaults (write side effects, high risk, not idempotent).
	// Default false: fail closed.
	ExposeUncovered bool `yaml:"expose_uncovered,omitempty"`

	Temporal Temporal `yaml:"temporal,omitempty"`
	Task     Task     `yaml:"task,omitempty"`
}

// Temporal says which Temporal to use. An empty Address means the embedded
// dev server (only `airlock dev` runs it).
type Temporal struct {
	Address   string `yaml:"address,omitempty"`
	Namespace string `yaml:"namespace,omitempty"`  // default "default"
	TaskQueue string `yaml:"task_queue,omitempty"` // default "airlock"
}

// Task holds the default limits of an agent task.
type Task struct {
	MaxCalls    int                `yaml:"max_calls,omitempty"`    // default 1000
	Deadline    manifests.Duration `yaml:"deadline,omitempty"`     // default 24h
	IdleTimeout manifests.Duration `yaml:"idle_timeout,omitempty"` // default 1h
}

// Snapshot is a loaded, validated configuration with its manifests.
type Snapshot struct {
	Config    *Config
	Manifests []*manifests.Manifest // sorted by server name
}
