package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
)

const approvalsLong = `approve and deny decide as the principal whose API key is in AIRLOCK_API_KEY
(or in the file --key-file names), checked against --config. The task's
workflow applies the same rules as to a Slack click: the approver must be
in the request's group, may not approve their own call, and votes once.
--digest binds the decision to the digest "show" printed. approve --args FILE
approves with edited arguments: FILE holds the JSON object to run instead
(start from "show --json"; a "[redacted]" left at a masked path keeps the
call's own value). The task's workflow judges the edited call again.

Talks to the Temporal of a running "airlock dev" (127.0.0.1:7233) unless
--temporal-address, TEMPORAL_ADDRESS or temporal.address in the config says
otherwise. The same requests are on the gateway's page /approvals.`

func approvalsCommand() *Command {
	decide := "[--digest PREFIX] [--comment TEXT] ID"
	approve := "[--digest PREFIX] [--comment TEXT] [--args FILE] ID"
	return &Command{Name: "approvals", Short: "decide on calls waiting for approval", Long: approvalsLong,
		Sub: []*Command{
			{Name: "list", Short: "pending requests", Long: "Lists the pending requests.\n\n" + approvalsLong,
				Flags: bind(approvalsFlags, approvalsList)},
			{Name: "show", Usage: "[--json] ID", Short: "one request in full (arguments masked)",
				Long: "Shows one request in full, its arguments masked, and its digest.\n\n" + approvalsLong, Flags: bind(approvalsFlags, approvalsShow)},
			{Name: "approve", Usage: "[--grant-calls N] [--grant-for DURATION] " + approve, Short: "approve the request as the principal of your API key",
				Long: approvalsLong + grantsLong, Flags: bind(approvalsFlags, decideWith(true))},
			{Name: "revoke", Usage: "[--reason TEXT] GRANT-ID", Short: "revoke a grant an approval made",
				Long:  "Revokes a grant (airlock tasks show TASK lists them): the calls it covered ask\nfor approval again. The grant's principal and its request's approvers may.\n\n" + approvalsLong,
				Flags: bind(approvalsFlags, approvalsRevoke)},
			{Name: "deny", Usage: decide, Short: "deny the request as the principal of your API key",
				Long: approvalsLong, Flags: bind(approvalsFlags, decideWith(false))},
		}}
}

// envAPIKey holds the key approve and deny decide with.
const envAPIKey = "AIRLOCK_API_KEY"

// approvalsOptions are the flags of every approvals subcommand.
type approvalsOptions struct {
	conn     temporalFlags
	config   string
	keyFile  string
	asJSON   bool
	comment  string
	digest   string
	auditLog string
	argsFile string // approve with edits
	// Approval grants (approvals_grants.go).
	grantCalls     string
	grantFor       string
	grantPrincipal bool
	reason         string
}

func approvalsFlags(fs *flag.FlagSet, o *approvalsOptions) {
	fs.StringVar(&o.config, "config", defaultConfig, "configuration `file` (its principals authenticate the key; its temporal block is the default connection)")
	o.conn.registerOverConfig(fs)
	fs.StringVar(&o.keyFile, "key-file", "", "read the API key to decide with from this `file` (default: env "+envAPIKey+")")
	fs.BoolVar(&o.asJSON, "json", false, "show: print JSON (arguments masked)")
	fs.StringVar(&o.comment, "comment", "", "approve, deny: a `comment` recorded with the vote (the agent sees it on a deny)")
	fs.StringVar(&o.digest, "digest", "", "approve, deny: refuse unless the request's digest starts with this `prefix` (from show)")
	fs.StringVar(&o.argsFile, "args", "", "approve: approve with edited arguments, the JSON object in this `file` (- reads stdin)")
	grantFlags(fs, o)
	fs.StringVar(&o.auditLog, "audit-log", "", "approve, deny: where the decision is audited: stdout, stderr, off or a `file` (default: audit.log in the config, else <data_dir>/audit.jsonl)")
}

// check reports a mistake in the arguments of subcommand sub before
// anything is loaded or dialed (exit status 2), or returns 0.
func (o *approvalsOptions) check(c *Call, sub string) int {
	deciding := sub == "approve" || sub == "deny"
	switch {
	case sub == "list" && len(c.Args) > 0:
		return c.usage("unexpected argument %q (to see one request: airlock approvals show ID)", c.Args[0])
	case sub != "list" && len(c.Args) != 1:
		return c.usage("name one request ID (airlock approvals list shows them)")
	case o.asJSON && sub != "show":
		return c.usage("--json applies to show only")
	case !deciding && (o.comment != "" || o.digest != ""):
		return c.usage("--comment and --digest apply to approve and deny only")
	case o.argsFile != "" && sub != "approve":
		return c.usage("--args applies to approve only (edited arguments come with an approval)")
	}
	if code := o.checkGrant(c, sub); code != 0 {
		return code
	}
	if sub != "list" {
		if _, err := approver.TaskOf(c.Args[0]); err != nil {
			return c.usage("%v", err)
		}
	}
	if len(o.comment) > 1000 {
		return c.usage("--comment is %d bytes; keep it under 1000", len(o.comment))
	}
	return 0
}

// connect reads the configuration (needed to authenticate a decision;
// otherwise only for its Temporal connection, and a missing default file
// is fine) and fills in the connection it names.
func (o *approvalsOptions) connect(c *Call, deciding bool) (*config.Config, bool) {
	cfg, err := loadApprovalsConfig(o.config, deciding)
	if err != nil {
		c.fail(err)
		return nil, false
	}
	var addr, ns string
	if cfg != nil {
		addr, ns = cfg.Temporal.Address, cfg.Temporal.Namespace
	}
	o.conn.address = firstNonEmpty(o.conn.address, addr, "127.0.0.1:7233")
	o.conn.namespace = firstNonEmpty(o.conn.namespace, ns, "default")
	return cfg, true
}

// withLocal dials and runs f with the local decider.
func (o *approvalsOptions) withLocal(c *Call, f func(ctx context.Context, local *approver.Local) int) int {
	return o.conn.run(c, 60*time.Second, func(ctx context.Context, tc client.Client) int {
		return f(ctx, &approver.Local{Temporal: tc, Namespace: o.conn.namespace})
	})
}

func approvalsList(c *Call, o *approvalsOptions) int {
	if code := o.check(c, "list"); code != 0 {
		return code
	}
	if _, ok := o.connect(c, false); !ok {
		return 1
	}
	return o.withLocal(c, func(ctx context.Context, local *approver.Local) int {
		reqs, err := local.List(ctx)
		if err == nil {
			err = approver.WriteList(c.Stdout, reqs, time.Now())
		}
		if err != nil {
			return c.fail(err)
		}
		return 0
	})
}

func approvalsShow(c *Call, o *approvalsOptions) int {
	if code := o.check(c, "show"); code != 0 {
		return code
	}
	if _, ok := o.connect(c, false); !ok {
		return 1
	}
	return o.withLocal(c, func(ctx context.Context, local *approver.Local) int {
		r, err := local.Show(ctx, c.Args[0])
		if err != nil {
			return c.fail(err)
		}
		if o.asJSON {
			printJSON(c.Stdout, approver.Redacted(r))
			return 0
		}
		if err := approver.WriteRequest(c.Stdout, r, time.Now()); err != nil {
			return c.fail(err)
		}
		return 0
	})
}

// decideWith is approve (or deny): the decision of the principal whose key
// is given, delivered to the task and written to the audit stream.
func decideWith(approve bool) func(*Call, *approvalsOptions) int {
	sub := map[bool]string{true: "approve", false: "deny"}[approve]
	return func(c *Call, o *approvalsOptions) int {
		cfg, who, code := o.decider(c, sub)
		if who == "" {
			return code
		}
		grant, _ := o.grant() // checked by check
		args, err := readEditedArgs(c, o.argsFile)
		if err != nil {
			return c.usage("%v", err)
		}
		return o.withLocal(c, func(ctx context.Context, local *approver.Local) int {
			return o.decide(ctx, c, cfg, local, approver.Decision{RequestID: c.Args[0], Approver: who, Approve: approve,
				Via: "cli", Comment: strings.TrimSpace(o.comment), Digest: o.digest, Arguments: args, Grant: grant})
		})
	}
}

// decider checks sub's flags, connects and authenticates the API key: the
// principal who decides ("" after reporting why there is none, with the
// exit status).
func (o *approvalsOptions) decider(c *Call, sub string) (*config.Config, string, int) {
	if code := o.check(c, sub); code != 0 {
		return nil, "", code
	}
	cfg, ok := o.connect(c, true)
	if !ok {
		return nil, "", 1
	}
	who, code := o.approver(c, cfg)
	return cfg, who, code
}

// openAudit opens the audit stream the services write to, so the CLI's
// decisions land beside theirs: --audit-log, else the one the airlock dev
// serving tc's Temporal writes (its --data-dir and --audit-log included),
// else the configuration's. doing says what --audit-log off allows.
func (o *approvalsOptions) openAudit(ctx context.Context, c *Call, tc client.Client, cfg *config.Config, doing string) (*auditstream.Log, io.Closer, int) {
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, nil, c.fail(err)
	}
	dest := o.auditLog
	if dest == "" {
		_, dest = runningDev(ctx, tc, o.conn.namespace)
	}
	audit, closeAudit, err := auditstream.Open(firstNonEmpty(dest, cfg.AuditLog(dataDir)), c.Stdout, c.Stderr)
	if err != nil {
		return nil, nil, c.fail(fmt.Errorf("%w (pass --audit-log off to %s without auditing)", err, doing))
	}
	return audit, closeAudit, 0
}

// failDecision reports err about id, a refusal by its reason.
func failDecision(c *Call, id string, err error) int {
	var ref *approver.Refusal
	if errors.As(err, &ref) && ref.Repeat {
		fmt.Fprintf(c.Stdout, "%s: already decided: %s\n", id, ref.Reason)
		return 0 // the vote stands; nothing new was recorded
	}
	if errors.As(err, &ref) {
		return c.failOn(id, fmt.Errorf("refused: %s", ref.Reason))
	}
	return c.failOn(id, err)
}

// approver is the principal whose API key decides ("" after reporting
// why there is none).
func (o *approvalsOptions) approver(c *Call, cfg *config.Config) (string, int) {
	key, src, err := readAPIKey(o.keyFile)
	if err != nil {
		return "", c.usage("%v", err)
	}
	p, err := approver.AuthenticateKey(identity.New(cfg), key)
	if err != nil {
		return "", c.fail(fmt.Errorf("the key in %s: %w", src, err))
	}
	return p.Name, 0
}

// decide delivers the decision, audited in the same stream as the
// services'.
func (o *approvalsOptions) decide(ctx context.Context, c *Call, cfg *config.Config, local *approver.Local, d approver.Decision) int {
	audit, closeAudit, code := o.openAudit(ctx, c, local.Temporal, cfg, "decide")
	if code != 0 {
		return code
	}
	defer closeAudit.Close()
	local.Audit = audit
	res, err := local.Decide(ctx, d)
	if err != nil {
		return failDecision(c, d.RequestID, err)
	}
	fmt.Fprintf(c.Stdout, "%s (as %s): %s\n", res.RequestID, d.Approver, res.Message)
	if res.EditDigest != "" {
		fmt.Fprintf(c.Stdout, "edited arguments: digest %s\n", res.EditDigest)
	}
	if res.EditRefused != "" {
		return c.failOn(res.RequestID, fmt.Errorf("the edit was refused by policy: %s; nothing ran", res.EditRefused))
	}
	return 0
}

// readEditedArgs reads approve --args FILE ("-": stdin); nil without it.
func readEditedArgs(c *Call, file string) (json.RawMessage, error) {
	if file == "" {
		return nil, nil
	}
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(io.LimitReader(c.Stdin, api.MaxArgumentBytes+1))
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return nil, fmt.Errorf("--args: %w", err)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("--args %s: not JSON; write the arguments to run as one JSON object (start from airlock approvals show --json ID)", file)
	}
	return b, nil
}

// loadApprovalsConfig loads the configuration; without required, a missing
// default file gives nil.
func loadApprovalsConfig(path string, required bool) (*config.Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		if !required && path == defaultConfig {
			return nil, nil
		}
		err := configMissing(path, abs)
		if required {
			err = fmt.Errorf("%w (approve and deny authenticate the key against its principals)", err)
		}
		return nil, err
	}
	snap, err := config.Load(abs)
	if err != nil {
		return nil, err
	}
	return snap.Config, nil
}

// readAPIKey returns the key to decide with and where it came from. Keys
// never come from a flag: flags show in ps and shell history.
func readAPIKey(keyFile string) (key, source string, err error) {
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return "", "", fmt.Errorf("--key-file: %w", err)
		}
		key = strings.TrimSpace(string(b))
		if key == "" {
			return "", "", fmt.Errorf("--key-file %s is empty; put the API key in it (one line)", keyFile)
		}
		return key, "--key-file " + keyFile, nil
	}
	key = strings.TrimSpace(os.Getenv(envAPIKey))
	if key == "" {
		return "", "", fmt.Errorf("no API key to decide with: set %s to your key (the one your agent sends as Authorization: Bearer <key>), or pass --key-file FILE", envAPIKey)
	}
	return key, envAPIKey, nil
}
