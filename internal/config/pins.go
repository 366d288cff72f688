package config

import "path/filepath"

// PinsPath is the pins file (package pin): pins_file relative to the
// configuration file's directory, else pins.json in dataDir (the effective
// data directory, which flags may override).
func (c *Config) PinsPath(dataDir string) string {
	if c.PinsFile == "" {
		return filepath.Join(dataDir, "pins.json")
	}
	if filepath.IsAbs(c.PinsFile) || c.File == "" {
		return c.PinsFile
	}
	return filepath.Join(filepath.Dir(c.File), c.PinsFile)
}
