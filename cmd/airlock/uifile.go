package main

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// uiFile is where airlock dev records the Web UI it serves, in its data
// dir, so that audit show links to that UI (its port may be --ui-port's, or
// a free one) and to none under --no-ui.
const uiFile = "ui.json"

// servedUI is what uiFile holds: the embedded Temporal's address and the
// Web UI serving it ("" when none is served).
type servedUI struct {
	TemporalAddress string `json:"temporal_address"`
	UIURL           string `json:"ui_url"`
}

func writeServedUI(dataDir string, s servedUI) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dataDir, uiFile), append(b, '\n'), 0o600)
}

func removeServedUI(dataDir string) {
	_ = os.Remove(filepath.Join(dataDir, uiFile))
}

// readServedUI returns the Web UI that the airlock dev using dataDir
// serves for the Temporal at address, and whether that is known: false
// when no dev has recorded one, or it serves another Temporal.
func readServedUI(dataDir, address string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(dataDir, uiFile))
	if err != nil {
		return "", false
	}
	var s servedUI
	if json.Unmarshal(b, &s) != nil || s.TemporalAddress != address {
		return "", false
	}
	return s.UIURL, true
}
