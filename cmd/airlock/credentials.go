package main

// airlock credentials (issue 31 §3): the users' own credentials for
// upstreams with server.http.auth.user_oauth, which airlock stores when a
// user authorizes it (internal/consent, internal/credstore): list them
// (never a token), revoke one, make a key, re-encrypt after a rotation.
// The serving side (startConsent) opens the same store for the gateway
// and the worker.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/consent"
	"github.com/airlock-run/airlock/internal/credstore"
	"github.com/airlock-run/airlock/manifests"
)

const credentialsLong = `Upstreams with server.http.auth.user_oauth act as each user with the user's
own authorization at the upstream's provider (a code host, a SaaS API). A
user's first call is answered with a link to authorize airlock; the tokens the
provider then issues are stored encrypted (AES-256-GCM under the key in
AIRLOCK_CREDENTIAL_KEYS), bound to the principal and the upstream, in the blob
store of the configuration (blobs:, under credentials/), which every gateway
and worker shares. Only calls of that principal use them.

These commands read the configuration (--config) for where the store is and
what the upstreams are; list needs no key, revoke and rekey need
AIRLOCK_CREDENTIAL_KEYS as the gateways and workers have it.`

type credentialsOptions struct {
	config, dataDir, auditLog string
	asJSON                    bool
}

func credentialsFlags(fs *flag.FlagSet, o *credentialsOptions) {
	fs.StringVar(&o.config, "config", defaultConfig, "the configuration `file` (where the store is: blobs, data_dir)")
	fs.StringVar(&o.dataDir, "data-dir", "", "the data `dir`, when the configuration names none (default .airlock)")
}

func credentialsCommand() *Command {
	return &Command{Name: "credentials", Short: "list and revoke the users' own credentials for upstreams (user_oauth)", Long: credentialsLong,
		Sub: []*Command{
			{Name: "list", Short: "list stored credentials: who, upstream, scopes, expiry (never a token)", Long: credentialsLong, NoArgs: true,
				Flags: bind(func(fs *flag.FlagSet, o *credentialsOptions) {
					credentialsFlags(fs, o)
					fs.BoolVar(&o.asJSON, "json", false, "print JSON")
				}, credentialsList)},
			{Name: "revoke", Usage: "PRINCIPAL UPSTREAM", Short: "delete a user's credential, after revoking it at the provider (revocation_url)", Long: credentialsRevokeLong,
				Flags: bind(func(fs *flag.FlagSet, o *credentialsOptions) {
					credentialsFlags(fs, o)
					fs.StringVar(&o.auditLog, "audit-log", "", "where the revocation is audited: stdout, stderr, off or a `file` (default: audit.log in the config, else <data_dir>/audit.jsonl)")
				}, credentialsRevoke)},
			{Name: "key", Short: "make a credential key (AIRLOCK_CREDENTIAL_KEYS)", Long: credentialsKeyLong, NoArgs: true, Flags: bind(nil, credentialsKey)},
			{Name: "rekey", Short: "re-encrypt every credential under the current (first) key, after a rotation", Long: credentialsKeyLong, NoArgs: true, Flags: bind(credentialsFlags, credentialsRekey)},
		}}
}

const credentialsRevokeLong = `Deletes PRINCIPAL's credential for UPSTREAM. When the upstream's user_oauth has
a revocation_url, the provider is asked first to revoke the refresh token
(RFC 7009), with the client secret from client_secret_env; the credential is
deleted whether or not the provider could be told, and the command says which.
The revocation is written to the audit stream (credential_revoked). The user's
next call to the upstream asks them to authorize again.`

const credentialsKeyLong = `AIRLOCK_CREDENTIAL_KEYS is a list "ID:KEY,ID:KEY": the first key encrypts,
every one listed decrypts. Set the same value on every gateway and worker.
To rotate: put the new key first and keep the old one after it everywhere, run
airlock credentials rekey (it re-encrypts every credential under the new key),
then drop the old one. A credential encrypted under a key no longer listed
cannot be used: its user is asked to authorize again once it is revoked.`

// credentialStore opens the store the configuration names.
func (o *credentialsOptions) credentialStore(ctx context.Context, needKeys bool) (*credstore.Store, *config.Snapshot, string, error) {
	abs, err := filepath.Abs(o.config)
	if err != nil {
		return nil, nil, "", err
	}
	snap, err := config.Load(abs)
	if err != nil {
		return nil, nil, "", err
	}
	dataDir, err := filepath.Abs(firstNonEmpty(o.dataDir, snap.Config.DataDir, ".airlock"))
	if err != nil {
		return nil, nil, "", err
	}
	keys, err := credstore.KeysFromEnv(os.Getenv)
	if err != nil {
		return nil, nil, "", err
	}
	if keys == nil && needKeys {
		return nil, nil, "", errors.New(credstore.EnvKeys + " is not set; set it as the gateways and workers have it")
	}
	u, err := snap.Config.BlobsURL(dataDir)
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", abs, err)
	}
	s, err := credstore.Open(ctx, u, keys)
	return s, snap, dataDir, err
}

func credentialsList(c *Call, o *credentialsOptions) int {
	ctx := context.Background()
	s, _, _, err := o.credentialStore(ctx, false)
	if err != nil {
		return c.fail(err)
	}
	defer s.Close()
	recs, bad, err := s.List(ctx)
	if err != nil {
		return c.fail(err)
	}
	if o.asJSON {
		if recs == nil {
			recs = []credstore.Record{}
		}
		printJSON(c.Stdout, recs)
	} else if len(recs) == 0 {
		fmt.Fprintf(c.Stdout, "no stored credentials in %s\n", s)
	} else {
		tw := tabwriter.NewWriter(c.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PRINCIPAL\tUPSTREAM\tSCOPES\tOBTAINED\tACCESS EXPIRES\tREFRESH\tKEY")
		for _, r := range recs {
			exp := "-"
			if !r.Expiry.IsZero() {
				exp = r.Expiry.Local().Format(time.DateTime)
			}
			refresh := "no"
			if r.Refreshable {
				refresh = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Principal, r.Upstream, strings.Join(r.Scopes, " "), r.Obtained.Local().Format(time.DateTime), exp, refresh, r.KeyID)
		}
		tw.Flush()
	}
	for _, b := range bad {
		fmt.Fprintf(c.Stderr, "%s: %s in %s cannot be read (altered, or not a credential); delete it\n", c.Name, b, s)
	}
	if len(bad) > 0 {
		return 1
	}
	return 0
}

func credentialsRevoke(c *Call, o *credentialsOptions) int {
	if len(c.Args) != 2 || c.Args[0] == "" || c.Args[1] == "" {
		return c.usage("name PRINCIPAL and UPSTREAM, e.g. airlock credentials revoke alice code; airlock credentials list shows them")
	}
	ctx := context.Background()
	s, snap, dataDir, err := o.credentialStore(ctx, false)
	if err != nil {
		return c.fail(err)
	}
	defer s.Close()
	audit, closeAudit, err := auditstream.Open(firstNonEmpty(o.auditLog, snap.Config.AuditLog(dataDir)), c.Stdout, c.Stderr)
	if err != nil {
		return c.fail(fmt.Errorf("%w (pass --audit-log off to revoke without auditing)", err))
	}
	defer closeAudit.Close()
	cfgAbs, _ := filepath.Abs(o.config)
	vars := map[string]string{"AIRLOCK_DATA_DIR": dataDir, "AIRLOCK_CONFIG_DIR": filepath.Dir(cfgAbs)}
	f := consent.New(consent.Options{Store: s, Audit: audit, Upstreams: userOAuthOf(func() []*manifests.Manifest { return snap.Manifests }, vars)})
	principal, server := c.Args[0], c.Args[1]
	rv, err := f.Revoke(ctx, principal, server, operator())
	if err != nil {
		return c.failOn(principal, err)
	}
	fmt.Fprintf(c.Stdout, "%s: credential for %s deleted", principal, server)
	if rv.Provider != "" {
		fmt.Fprintf(c.Stdout, "; %s", rv.Provider)
	}
	fmt.Fprintln(c.Stdout, ". Their next call to it asks them to authorize again.")
	return 0
}

func credentialsKey(c *Call, _ *noFlags) int {
	id := time.Now().UTC().Format("20060102")
	fmt.Fprintf(c.Stdout, "%s=%s:%s\n\nSet it on every gateway and worker (keep it secret). To rotate, put a new\nID:KEY first, keep the old one after a comma, run airlock credentials rekey,\nthen drop the old one.\n", credstore.EnvKeys, id, credstore.NewKey())
	return 0
}

func credentialsRekey(c *Call, o *credentialsOptions) int {
	ctx := context.Background()
	s, _, _, err := o.credentialStore(ctx, true)
	if err != nil {
		return c.fail(err)
	}
	defer s.Close()
	n, err := s.Rekey(ctx)
	if err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(c.Stdout, "%d credential(s) re-encrypted under key %s\n", n, s.Keys().Current())
	return 0
}

// userOAuthOf finds the user_oauth block of an upstream among the
// manifests in force, its ${VAR}s expanded.
func userOAuthOf(current func() []*manifests.Manifest, vars map[string]string) func(string) *manifests.UserOAuth {
	return func(server string) *manifests.UserOAuth {
		for _, m := range current() {
			if m.Server.Name == server && m.Server.UsesUserOAuth() {
				return m.Server.Expand(vars).HTTP.Auth.UserOAuth
			}
		}
		return nil
	}
}

// startConsent opens the credential store for the gateway and the worker
// of this process: the blob store of the configuration, the keys from
// AIRLOCK_CREDENTIAL_KEYS. Without keys, calls to upstreams with
// user_oauth are refused with words that say to set them.
func (s *stack) startConsent(ctx context.Context) error {
	e := s.env
	keys, err := credstore.KeysFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	u, err := e.snap.Config.BlobsURL(e.dataDir)
	if err != nil {
		return fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	store, err := credstore.Open(ctx, u, keys)
	if err != nil {
		return fmt.Errorf("%s: %w", e.cfgPath, err)
	}
	s.stops = append(s.stops, func() { _ = store.Close() })
	for _, m := range e.snap.Manifests {
		if m.Server.UsesUserOAuth() && keys == nil {
			e.log.Warn().Str("server", m.Server.Name).Msg("this upstream acts as each user with their own authorization (server.http.auth.user_oauth), and " + credstore.EnvKeys + " is not set: its calls are refused. `airlock credentials key` makes one")
		}
	}
	if keys != nil {
		e.log.Info().Str("key_id", keys.Current()).Str("store", store.String()).Msg("credential store: users' own credentials for upstreams with user_oauth")
	}
	s.consent = consent.New(consent.Options{Store: store, Audit: e.audit, Log: &e.log,
		Upstreams: userOAuthOf(func() []*manifests.Manifest { return s.cfg.Current().snap.Manifests }, e.vars())})
	return nil
}
