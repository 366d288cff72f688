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

	"github.com/airlock-run/airlock/approver"
	"github.com/airlock-run/airlock/internal/auditstream"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
)

const approvalsUsage = `Usage:
  airlock approvals list                 pending requests
  airlock approvals show [--json] ID     one request in full (arguments masked)
  airlock approvals approve [--digest PREFIX] [--comment TEXT] ID
  airlock approvals deny    [--digest PREFIX] [--comment TEXT] ID

approve and deny decide as the principal whose API key is in AIRLOCK_API_KEY
(or in the file --key-file names), checked against --config. The task's
workflow applies the same rules as to a Slack click: the approver must be
in the request's group, may not approve their own call, and votes once.
--digest binds the decision to the digest "show" printed.

Talks to the Temporal of a running "airlock dev" (127.0.0.1:7233) unless
--temporal-address, TEMPORAL_ADDRESS or temporal.address in the config says
otherwise. The same requests are on the gateway's page /approvals.
`

// envAPIKey holds the key approve and deny decide with.
const envAPIKey = "AIRLOCK_API_KEY"

func runApprovals(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, approvalsUsage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, approvalsUsage)
		return 0
	}
	sub, rest := args[0], args[1:]
	switch sub {
	case "list", "show", "approve", "deny":
	default:
		fmt.Fprintf(stderr, "airlock approvals: unknown subcommand %q\n%s", sub, approvalsUsage)
		return 2
	}
	name := "airlock approvals " + sub
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgFlag := fs.String("config", defaultConfig, "configuration `file` (its principals authenticate the key; its temporal block is the default connection)")
	addr := fs.String("temporal-address", os.Getenv("TEMPORAL_ADDRESS"), "Temporal frontend `host:port` (env TEMPORAL_ADDRESS; default: the config's, else 127.0.0.1:7233)")
	ns := fs.String("namespace", os.Getenv("TEMPORAL_NAMESPACE"), "Temporal `namespace` (env TEMPORAL_NAMESPACE; default: the config's, else \"default\")")
	keyFile := fs.String("key-file", "", "read the API key to decide with from this `file` (default: env "+envAPIKey+")")
	asJSON := fs.Bool("json", false, "show: print JSON (arguments masked)")
	comment := fs.String("comment", "", "approve, deny: a `comment` recorded with the vote (the agent sees it on a deny)")
	digest := fs.String("digest", "", "approve, deny: refuse unless the request's digest starts with this `prefix` (from show)")
	auditLog := fs.String("audit-log", "", "approve, deny: where the decision is audited: stdout, stderr, off or a `file` (default: audit.log in the config, else <data_dir>/audit.jsonl)")
	var tf tlsFlags
	tf.register(fs)
	fs.Usage = func() { fmt.Fprint(stderr, approvalsUsage+"\nFlags:\n"); fs.PrintDefaults() }
	pos, err := parseInterspersed(fs, rest)
	if err != nil {
		return parseExit(err)
	}

	// Check the arguments before loading or dialing anything.
	deciding := sub == "approve" || sub == "deny"
	switch {
	case sub == "list" && len(pos) > 0:
		fmt.Fprintf(stderr, "%s: unexpected argument %q (to see one request: airlock approvals show ID)\n", name, pos[0])
		return 2
	case sub != "list" && len(pos) != 1:
		fmt.Fprintf(stderr, "%s: name one request ID (airlock approvals list shows them)\n", name)
		return 2
	case *asJSON && sub != "show":
		fmt.Fprintf(stderr, "%s: --json applies to show only\n", name)
		return 2
	case !deciding && (*comment != "" || *digest != ""):
		fmt.Fprintf(stderr, "%s: --comment and --digest apply to approve and deny only\n", name)
		return 2
	}
	if sub != "list" {
		if _, err := approver.TaskOf(pos[0]); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
	}
	if len(*comment) > 1000 {
		fmt.Fprintf(stderr, "%s: --comment is %d bytes; keep it under 1000\n", name, len(*comment))
		return 2
	}

	// The configuration: needed to authenticate a decision; otherwise only
	// its Temporal connection is read, and a missing default file is fine.
	cfg, err := loadApprovalsConfig(*cfgFlag, deciding)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	var approverName string
	if deciding {
		key, src, err := readAPIKey(*keyFile)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 2
		}
		p, err := approver.AuthenticateKey(identity.New(cfg), key)
		if err != nil {
			fmt.Fprintf(stderr, "%s: the key in %s: %v\n", name, src, err)
			return 1
		}
		approverName = p.Name
	}
	address, namespace := firstNonEmpty(*addr, "127.0.0.1:7233"), firstNonEmpty(*ns, "default")
	if cfg != nil {
		address = firstNonEmpty(*addr, cfg.Temporal.Address, "127.0.0.1:7233")
		namespace = firstNonEmpty(*ns, cfg.Temporal.Namespace, "default")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	copts := client.Options{HostPort: address, Namespace: namespace, Logger: quietLogger{}}
	if err := tf.clientOptions(&copts); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	c, err := client.DialContext(dctx, copts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: cannot connect to Temporal at %s (namespace %s): %v\nIs airlock dev running? For another cluster pass --temporal-address HOST:PORT (or set TEMPORAL_ADDRESS).\n", name, address, namespace, err)
		return 1
	}
	defer c.Close()
	local := approver.Local{Temporal: c, Namespace: namespace}
	now := time.Now()

	switch sub {
	case "list":
		reqs, err := local.List(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		if err := approver.WriteList(stdout, reqs, now); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		return 0
	case "show":
		r, err := local.Show(ctx, pos[0])
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(approver.Redacted(r))
			return 0
		}
		if err := approver.WriteRequest(stdout, r, now); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return 1
		}
		return 0
	}
	// The decision goes to the same audit stream as the services'.
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	audit, closeAudit, err := auditstream.Open(firstNonEmpty(*auditLog, cfg.AuditLog(dataDir)), stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v (pass --audit-log off to decide without auditing)\n", name, err)
		return 1
	}
	defer closeAudit.Close()
	local.Audit = audit
	res, err := local.Decide(ctx, approver.Decision{RequestID: pos[0], Approver: approverName, Approve: sub == "approve",
		Via: "cli", Comment: strings.TrimSpace(*comment), Digest: *digest})
	var ref *approver.Refusal
	if errors.As(err, &ref) {
		fmt.Fprintf(stderr, "%s %s: refused: %s\n", name, pos[0], ref.Reason)
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", name, pos[0], err)
		return 1
	}
	fmt.Fprintf(stdout, "%s (as %s): %s\n", res.RequestID, approverName, res.Message)
	return 0
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
