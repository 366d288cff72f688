package policy

import (
	"crypto/sha256"
	"encoding/hex"
)

// Covering returns p with a Version that also covers sources: a digest of
// what else decides calls with it (the manifests' declarations: risk,
// permissions, data levels, path roots). A reload that changes only a
// manifest then records decisions under a new version too. Empty sources
// return p unchanged.
func (p *Policy) Covering(sources string) *Policy {
	if p == nil || sources == "" {
		return p
	}
	q := *p
	sum := sha256.Sum256([]byte(p.version + "\x00" + sources))
	q.version = hex.EncodeToString(sum[:8])
	return &q
}
