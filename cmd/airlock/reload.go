package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"syscall"

	"github.com/airlock-run/airlock/activities"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/reload"
	"github.com/airlock-run/airlock/internal/upstream"
	"github.com/airlock-run/airlock/manifests"
)

// cfgVersion is one loaded and validated version of the configuration: what
// every role reads per request or call, and replaces whole on a reload
// (SIGHUP, or a change to airlock.yaml or a manifest).
type cfgVersion struct {
	snap    *config.Snapshot
	servers []manifests.Server // the manifests' servers, ${VAR}s expanded
	dir     *identity.Directory
	groups  map[string][]string
	// judge is what the worker decides with (nil in roles without one).
	judge *activities.Judge
}

// loadVersion reads the configuration and its manifests with the loader and
// checkers of the start (and of `airlock manifests validate`) and builds
// everything a version holds. pool, when set, is the worker's upstream
// pool, which its catalog reads schemas from.
func (e *env) loadVersion(snap *config.Snapshot, r roles, pool *upstream.Pool) (*cfgVersion, error) {
	if snap == nil {
		var err error
		if snap, err = config.Load(e.cfgPath); err != nil {
			return nil, err
		}
	}
	servers, err := e.expandServers(snap)
	if err != nil {
		return nil, err
	}
	v := &cfgVersion{snap: snap, servers: servers, dir: identity.New(snap.Config), groups: snap.Config.GroupMembers()}
	if r.gateway && v.dir.Empty() {
		return nil, fmt.Errorf("%s: no principals: the gateway serves only authenticated callers; add principals and roles (the example airlock.yaml shows how, with dev keys)", e.cfgPath)
	}
	if r.stdio {
		if _, err := v.dir.Local(); err != nil {
			return nil, fmt.Errorf("%s: %w", e.cfgPath, err)
		}
	}
	if r.worker {
		v.judge = &activities.Judge{Policy: snap.Policy, Groups: v.groups,
			Catalog: activities.NewCatalog(snap.Manifests, servers, pool, snap.Config.ExposeUncovered)}
		if v.judge.External, err = activities.NewExternal(snap.Config.ExternalPolicy, os.Getenv); err != nil {
			return nil, fmt.Errorf("%s: %w", e.cfgPath, err)
		}
	}
	return v, nil
}

// watched are the files a version is read from: the configuration file,
// and its manifest patterns (a new file matching one is a new manifest).
func watched(v *cfgVersion) []string {
	c := v.snap.Config
	out := []string{c.File}
	dir := filepath.Dir(c.File)
	for _, pat := range c.Manifests {
		if !filepath.IsAbs(pat) {
			pat = filepath.Join(dir, pat)
		}
		out = append(out, pat)
	}
	for _, m := range v.snap.Manifests {
		out = append(out, m.File)
	}
	return out
}

// startReload makes the stack's configuration reloadable: s.cfg holds the
// first version (from the configuration already loaded), and reloading
// applies each next one to the upstream pool, the principals, the gateway
// and the worker's judge.
func (s *stack) startReload(r roles) error {
	e := s.env
	first, err := e.loadVersion(e.snap, r, s.pool)
	if err != nil {
		return err
	}
	log := e.log.With().Str("component", "reload").Logger()
	s.cfg = reload.New(first, reload.Options[cfgVersion]{
		Load:   func() (*cfgVersion, error) { return e.loadVersion(nil, r, s.pool) },
		Apply:  s.applyVersion,
		Watch:  watched,
		Logger: &log,
	})
	return nil
}

// applyVersion brings what outlives a version in line with the new one.
// The switch itself has happened (s.cfg.Current is next): the worker's
// next decision and the gateway's next request already use it.
func (s *stack) applyVersion(prev, next *cfgVersion) {
	e := s.env
	if s.pool != nil {
		ch := s.pool.Apply(next.servers, e.drain())
		if !ch.Empty() {
			e.log.Info().Strs("added", ch.Added).Strs("removed", ch.Removed).Strs("replaced", ch.Replaced).
				Msg("upstreams changed: added ones connect; removed ones finish their calls in flight, then stop")
		}
		warnNewWasm(s, prev, next)
	}
	if s.dir != nil {
		s.dir.Replace(next.dir)
	}
	s.gwMu.Lock()
	g := s.gw
	s.gwMu.Unlock()
	if g != nil {
		g.Reload(gatewayLive(next, s.dir))
	}
	e.log.Info().Str("policy", next.snap.Policy.Version()).Str("previous", prev.snap.Policy.Version()).
		Int("rules", len(next.snap.Config.Policy.Rules)).Int("manifests", len(next.snap.Manifests)).
		Msg("configuration version in force; calls waiting for approval keep the request they were asked with, and are judged again once approved")
	warnRestartOnly(e, prev.snap.Config, next.snap.Config)
}

// gatewayLive is what the gateway takes from a version.
func gatewayLive(v *cfgVersion, dir *identity.Directory) gateway.Live {
	cfg := v.snap.Config
	l := gateway.Live{Manifests: v.snap.Manifests, Policy: v.snap.Policy, ExposeUncovered: cfg.ExposeUncovered,
		MaxCalls: cfg.Task.MaxCalls, DeadlineAfter: cfg.Task.Deadline.D(), IdleTimeout: cfg.Task.IdleTimeout.D(),
		RollbackOnDeny: cfg.Task.RollbackOnDeny, RollbackNotify: cfg.Task.RollbackNotify, State: cfg.StateConfig(),
		TaskRateLimits: cfg.TaskRateLimits(), Budget: cfg.Task.Budget}
	if dir != nil {
		if p, err := dir.Local(); err == nil {
			l.Local = p
		}
	}
	return l
}

// warnNewWasm says that a wasm server added by a reload is not served
// until a restart: the sandbox compiles the modules of the first version.
func warnNewWasm(s *stack, prev, next *cfgVersion) {
	had := map[string]bool{}
	for _, m := range prev.snap.Manifests {
		had[m.Server.Name] = m.Server.WASM != nil
	}
	for _, m := range next.snap.Manifests {
		if m.Server.WASM != nil && !had[m.Server.Name] {
			s.env.log.Warn().Str("server", m.Server.Name).Str("manifest", m.File).
				Msg("a wasm server added by a reload is served after a restart; its tools are listed as unavailable until then")
		}
	}
}

// warnRestartOnly names the settings a reload read but does not apply:
// they shape listeners, connections and stores made at start.
func warnRestartOnly(e *env, prev, next *config.Config) {
	fields := []struct {
		name string
		a, b any
	}{
		{"listen", prev.Listen, next.Listen},
		{"data_dir", prev.DataDir, next.DataDir},
		{"temporal", prev.Temporal, next.Temporal},
		{"slack", prev.Slack, next.Slack},
		{"gateway", prev.Gateway, next.Gateway},
		{"catalog", prev.Catalog, next.Catalog},
		{"programs", prev.Programs, next.Programs},
		{"principals_from_tokens", prev.PrincipalsFromTokens, next.PrincipalsFromTokens},
		{"telemetry", prev.Telemetry, next.Telemetry},
	}
	for _, f := range fields {
		if !reflect.DeepEqual(f.a, f.b) {
			e.log.Warn().Str("field", f.name).Str("file", next.File).Msg("changed, but takes effect only at a restart; the rest of the new version is in force")
		}
	}
}

// notifyHUP catches SIGHUP from now on (its default action ends the
// process): call it before the slow part of starting, so that a SIGHUP
// sent meanwhile is a reload once the reloader runs.
func notifyHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// watchReload runs the stack's reloads until ctx ends: on SIGHUP and on
// changes to the configuration's files.
// hup comes from notifyHUP.
func watchReload(ctx context.Context, e *env, rl *reload.Reloader[cfgVersion], hup chan os.Signal) {
	go func() {
		defer signal.Stop(hup)
		if err := rl.Run(ctx, hup); err != nil {
			e.log.Warn().Err(err).Msg("configuration files are not watched; reload with SIGHUP")
		}
	}()
	<-rl.Watching() // quick: a change from now on is seen
	e.log.Info().Strs("files", watched(rl.Current())).Msg("reloading the configuration on SIGHUP and when these files change")
}

// approverReload makes the approver's principals (who a Slack user is)
// reloadable. Who may decide a request is recorded with the request, so a
// reload changes it for requests made after it only.
func approverReload(e *env, dir *identity.Directory) *reload.Reloader[cfgVersion] {
	log := e.log.With().Str("component", "reload").Logger()
	return reload.New(&cfgVersion{snap: e.snap, dir: dir, groups: e.snap.Config.GroupMembers()}, reload.Options[cfgVersion]{
		Load: func() (*cfgVersion, error) {
			v, err := e.loadVersion(nil, roles{}, nil)
			if err == nil && v.dir.Empty() {
				err = fmt.Errorf("%s: no principals: approvers are principals with a slack_user_id", e.cfgPath)
			}
			return v, err
		},
		Apply: func(prev, next *cfgVersion) {
			dir.Replace(next.dir)
			warnRestartOnly(e, prev.snap.Config, next.snap.Config)
		},
		Watch:  watched,
		Logger: &log,
	})
}
