package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPinsPath(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("m.yaml", "server:\n  name: echo\n  stdio:\n    command: echo-server\ntools:\n  echo: {side_effects: [none], data_access_level: public, risk: low, idempotent: true}\n")

	snap, err := Load(write("default.yaml", "manifests: [m.yaml]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snap.Config.PinsPath("/var/lib/airlock"), filepath.Join("/var/lib/airlock", "pins.json"); got != want {
		t.Errorf("default PinsPath = %s, want %s", got, want)
	}
	snap, err = Load(write("relative.yaml", "manifests: [m.yaml]\npins_file: state/pins.json\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := snap.Config.PinsPath("/ignored"), filepath.Join(dir, "state", "pins.json"); got != want {
		t.Errorf("relative pins_file: PinsPath = %s, want %s (relative to the configuration file)", got, want)
	}
	snap, err = Load(write("absolute.yaml", "manifests: [m.yaml]\npins_file: /etc/airlock/pins.json\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.Config.PinsPath("/ignored"); got != "/etc/airlock/pins.json" {
		t.Errorf("absolute pins_file: PinsPath = %s", got)
	}
	_, err = Load(write("empty.yaml", "manifests: [m.yaml]\npins_file: \"\"\n"))
	if err == nil || !strings.Contains(err.Error(), "pins_file") || !strings.Contains(err.Error(), "empty.yaml:2") {
		t.Errorf("empty pins_file: %v, want a problem at empty.yaml:2", err)
	}
}
