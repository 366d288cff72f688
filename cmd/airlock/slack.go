package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-run/airlock/approver/slack"
	"github.com/airlock-run/airlock/internal/config"
)

const slackLong = `manifest prints a Slack app manifest that creates the app airlock needs
(bot scopes, interactivity pointed at the gateway, or Socket Mode): paste it
in https://api.slack.com/apps → Create New App → From a manifest. Then
install the app, export its bot token and signing secret (or app-level
token) as the slack block of the configuration names them, and run check.

check verifies the configuration's Slack app against Slack: the bot token,
the signing secret or app-level token, every approver group's channel
(exists, not archived, the bot is in it) and the Slack user of every member
of those groups. It prints every problem with its fix and exits 1 if any.`

func slackCommand() *Command {
	return &Command{Name: "slack", Short: "set up and check the Slack app for approvals", Long: slackLong,
		Sub: []*Command{
			{Name: "manifest", Usage: "--url https://GATEWAY [--socket] [--name NAME]",
				Short: "print a Slack app manifest for this gateway", Long: slackLong, NoArgs: true, Flags: bind(slackManifestFlags, slackManifest)},
			{Name: "check", Usage: "[--config FILE]", Short: "check the Slack app, channels and approvers against Slack",
				Long: slackLong, NoArgs: true, Flags: bind(slackCheckFlags, slackCheck)},
		}}
}

type slackManifestOptions struct {
	url, name, config string
	socket            bool
}

func slackManifestFlags(fs *flag.FlagSet, o *slackManifestOptions) {
	fs.StringVar(&o.url, "url", "", "the gateway's public `https URL` (Slack posts clicks to it + the interactions path)")
	fs.BoolVar(&o.socket, "socket", false, "Socket Mode: no request URL; Slack clicks arrive over a connection the approver opens")
	fs.StringVar(&o.name, "name", "airlock approvals", "the app's `name` in Slack")
	fs.StringVar(&o.config, "config", defaultConfig, "configuration `file` whose slack block (mode, interactions_path) is used when it exists")
}

func slackManifest(c *Call, o *slackManifestOptions) int {
	var s config.Slack
	cfg, err := loadSlackConfig(o.config, c.given("config"))
	if err != nil {
		return c.fail(err)
	}
	if cfg != nil && cfg.Slack != nil {
		s = *cfg.Slack
	}
	if o.socket {
		s.Mode = "socket"
	} else if c.given("url") {
		s.Mode = "http"
	}
	if s.Mode == "socket" && o.url != "" {
		return c.usage("--url and Socket Mode exclude each other: Socket Mode has no request URL")
	}
	b, err := slack.Manifest(o.url, s, o.name)
	if err != nil {
		return c.usage("%v", err)
	}
	fmt.Fprint(c.Stdout, "# Slack app manifest for airlock: api.slack.com/apps → Create New App → From a manifest.\n")
	if s.Mode == "socket" {
		fmt.Fprint(c.Stdout, "# Socket Mode: after creating the app, make an app-level token with scope\n# connections:write (Basic Information → App-Level Tokens); manifests cannot.\n")
	}
	_, _ = c.Stdout.Write(b)
	return 0
}

type slackCheckOptions struct {
	config  string
	timeout time.Duration
}

func slackCheckFlags(fs *flag.FlagSet, o *slackCheckOptions) {
	fs.StringVar(&o.config, "config", defaultConfig, "configuration `file` whose slack block, approver groups and principals are checked")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "give up on Slack after this `duration`")
}

func slackCheck(c *Call, o *slackCheckOptions) int {
	cfg, err := loadSlackConfig(o.config, true)
	if err != nil {
		return c.fail(err)
	}
	app := slack.NewApp(cfg, os.Getenv)
	if app == nil {
		return c.fail(errors.New("the configuration has no slack block, so approvals are decided on /approvals and with airlock approvals; add one (see README: Approvals in Slack)"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	failed := 0
	for _, f := range app.Check(ctx, cfg) {
		if f.OK {
			fmt.Fprintf(c.Stdout, "ok    %s\n", f.What)
			continue
		}
		failed++
		fmt.Fprintf(c.Stdout, "FAIL  %s\n      fix: %s\n", f.What, f.Fix)
	}
	if failed > 0 {
		fmt.Fprintf(c.Stderr, "%s: %d problem(s); approvals in Slack will not work until they are fixed\n", c.Name, failed)
		return 1
	}
	fmt.Fprintln(c.Stdout, "The Slack app is ready for approvals.")
	return 0
}

// loadSlackConfig loads the configuration; without required, a missing
// default file gives nil.
func loadSlackConfig(path string, required bool) (*config.Config, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if !required {
			return nil, nil
		}
		abs, _ := filepath.Abs(path)
		return nil, configMissing(path, abs)
	}
	return loadApprovalsConfig(path, required)
}
