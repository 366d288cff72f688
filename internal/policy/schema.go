package policy

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
)

// Bounds of the resolved-schema cache. Schemas come from upstream servers, a
// few dozen per deployment; the bounds only stop a misbehaving upstream that
// changes its schemas on every listing from growing the cache without end.
const (
	schemaCacheEntries  = 512
	schemaCacheMaxBytes = 1 << 20 // larger schemas are resolved on every call
)

// schemaCache holds resolved input schemas keyed by their text. The text
// itself is the key (a map lookup with string(b) does not copy b), which is
// exact where a hash would be merely unlikely to collide.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]schemaEntry
}

type schemaEntry struct {
	rs     *jsonschema.Resolved
	perKey *jsonschema.Resolved // see validateArgs; nil when not derivable
	err    error
}

func newSchemaCache() *schemaCache { return &schemaCache{m: make(map[string]schemaEntry)} }

// get returns the resolved schema for raw, resolving and caching it on
// first use. Resolution errors are cached as well.
func (c *schemaCache) get(raw []byte) schemaEntry {
	c.mu.Lock()
	e, ok := c.m[string(raw)]
	c.mu.Unlock()
	if ok {
		return e
	}
	e = resolveSchema(raw)
	if len(raw) <= schemaCacheMaxBytes {
		c.mu.Lock()
		if len(c.m) >= schemaCacheEntries {
			clear(c.m) // crude, but the bound is far above what a deployment uses
		}
		c.m[string(raw)] = e
		c.mu.Unlock()
	}
	return e
}

// Draft-07 schemas are often declared without the trailing "#", which
// jsonschema-go does not recognise.
var schemaVersionAliases = map[string]string{
	"http://json-schema.org/draft-07/schema":  "http://json-schema.org/draft-07/schema#",
	"https://json-schema.org/draft-07/schema": "https://json-schema.org/draft-07/schema#",
}

func resolveSchema(raw []byte) (e schemaEntry) {
	defer func() {
		if r := recover(); r != nil {
			e = schemaEntry{err: fmt.Errorf("internal error in the schema resolver: %v", r)}
		}
	}()
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return schemaEntry{err: fmt.Errorf("decoding: %w", err)}
	}
	if v, ok := schemaVersionAliases[s.Schema]; ok {
		s.Schema = v
	}
	if !slices.Contains(supportedSchemaVersions, s.Schema) {
		return schemaEntry{err: fmt.Errorf("$schema %q is not supported; use draft-07 or draft 2020-12", s.Schema)}
	}
	pk := perKeySchema(&s) // before Resolve, which must see the schema unchanged afterwards
	// No loader: a $ref outside the schema is an error, never a fetch.
	rs, err := s.Resolve(nil)
	if err != nil {
		return schemaEntry{err: err}
	}
	e.rs = rs
	if pk != nil {
		if prs, err := pk.Resolve(nil); err == nil {
			e.perKey = prs
		}
	}
	return e
}

// supportedSchemaVersions are the $schema values jsonschema-go validates
// ("" means draft 2020-12).
var supportedSchemaVersions = []string{
	"",
	"http://json-schema.org/draft-07/schema#",
	"https://json-schema.org/draft-07/schema#",
	"https://json-schema.org/draft/2020-12/schema",
}

// maxPerKeyChecks bounds validateArgs's search for a deterministic message.
const maxPerKeyChecks = 64

// validateArgs validates args against the schema and returns a
// deterministic error.
//
// jsonschema-go stops at the first failure it meets, and it walks Go maps,
// so with two bad arguments which one it names varies from run to run. When
// the schema is a plain object schema (see perKeySchema), a failing call is
// re-checked one top-level argument at a time in sorted order, and the
// first argument that fails on its own is the one reported. If none does,
// the failure is about the object as a whole (a missing required argument)
// and the validator's own message, which does not depend on map order, is
// reported. Several failures nested inside one argument can still be named
// in either order; objects with more than maxPerKeyChecks arguments are
// reported as the validator found them.
func validateArgs(e schemaEntry, args map[string]any) error {
	err := safeValidate(e.rs, args)
	if err == nil || e.perKey == nil || len(args) < 2 || len(args) > maxPerKeyChecks {
		return err
	}
	one := make(map[string]any, 1)
	for _, k := range slices.Sorted(maps.Keys(args)) {
		clear(one)
		one[k] = args[k]
		if kerr := safeValidate(e.perKey, one); kerr != nil {
			return kerr
		}
	}
	return err
}

// perKeySchema derives from a plain object schema (no $ref, combinators,
// conditionals or dependent schemas at the root, whose verdict on one
// argument could depend on the others) the schema that one argument alone
// must satisfy: the same without the constraints on the set of arguments.
// It returns nil for other schemas.
func perKeySchema(s *jsonschema.Schema) *jsonschema.Schema {
	if s.Ref != "" || s.DynamicRef != "" || len(s.AllOf)+len(s.AnyOf)+len(s.OneOf) > 0 ||
		s.Not != nil || s.If != nil || s.Then != nil || s.Else != nil ||
		len(s.DependentSchemas) > 0 || len(s.DependencySchemas) > 0 || s.UnevaluatedProperties != nil {
		return nil
	}
	c := s.CloneSchemas()
	c.Required = nil
	c.MinProperties = nil
	c.MaxProperties = nil
	c.DependentRequired = nil
	c.DependencyStrings = nil
	return c
}

func safeValidate(rs *jsonschema.Resolved, v any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error in the schema validator: %v", r)
		}
	}()
	return rs.Validate(v)
}
