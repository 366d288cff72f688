package main

import (
	"fmt"
	"strings"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/internal/authzen"
	"github.com/airlock-run/airlock/internal/config"
)

// externalPolicy is the worker's external policy decision point from the
// configuration's external_policy (nil when there is none). The
// Authorization header's value is read from the environment here, so it
// stays in the process and never enters a workflow's history.
func externalPolicy(c *config.Config, getenv func(string) string) (*activities.External, error) {
	x := c.ExternalPolicy
	if x == nil {
		return nil, nil
	}
	auth := ""
	if name := x.AuthorizationEnv; name != "" {
		auth = strings.TrimSpace(getenv(name))
		if auth == "" {
			return nil, fmt.Errorf("external_policy.authorization_env names %s, which is not set; export it (the PDP's Authorization header, e.g. \"Bearer …\") or remove authorization_env", name)
		}
		if strings.ContainsAny(auth, "\r\n") {
			return nil, fmt.Errorf("external_policy.authorization_env: %s holds a line break, which cannot be sent in a header; set it to one line", name)
		}
	}
	return &activities.External{
		Client: authzen.New(authzen.Options{Endpoint: x.Endpoint, Timeout: x.EffectiveTimeout(),
			Authorization: auth, CacheEntries: x.EffectiveCacheEntries()}),
		AppliesTo: x.EffectiveAppliesTo(),
		OnError:   x.OnErrorFor,
	}, nil
}
