package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/airlock-run/airlock/manifests"
)

// manifestsDigest is what of the manifests the policy version covers (see
// policy.Policy.Covering): each server's name and path roots and its
// tools' declarations, in server order. File paths and the servers' commands,
// URLs and environment are not part of it, so replicas that read the same
// manifests from different directories agree on the version.
func manifestsDigest(ms []*manifests.Manifest) string {
	type entry struct {
		Server    string                     `json:"server"`
		PathRoots []string                   `json:"path_roots,omitempty"`
		Tools     map[string]*manifests.Tool `json:"tools"` // encoding/json sorts map keys
	}
	es := make([]entry, 0, len(ms))
	for _, m := range ms {
		es = append(es, entry{Server: m.Server.Name, PathRoots: m.Server.PathRoots, Tools: m.Tools})
	}
	b, err := json.Marshal(es)
	if err != nil {
		return "" // the version then covers the rules only
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
