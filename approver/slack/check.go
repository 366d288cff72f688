package slack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/internal/config"
)

// Finding is one thing App.Check looked at: what it found and, when
// something is wrong, how to fix it.
type Finding struct {
	OK   bool
	What string
	Fix  string `json:",omitempty"`
}

// Check verifies the Slack app against Slack as airlock will use it: the
// bot token (auth.test), the secret of the configured mode (the signing
// secret for http, the app-level token for socket: apps.connections.open),
// the channel of every approver group (it exists, is not archived, and the
// bot is in it, since chat.postMessage needs that) and the Slack user of
// every member of a group with a channel (set, exists, a person). It
// reports every problem, not only the first.
func (a *App) Check(ctx context.Context, cfg *config.Config) []Finding {
	var out []Finding
	ok := func(format string, args ...any) {
		out = append(out, Finding{OK: true, What: fmt.Sprintf(format, args...)})
	}
	bad := func(fix, format string, args ...any) {
		out = append(out, Finding{What: fmt.Sprintf(format, args...), Fix: fix})
	}

	api, err := a.BotClient()
	if err != nil {
		bad("export the bot token (OAuth & Permissions → Bot User OAuth Token) in airlock's environment", "%v", err)
		return out
	}
	auth, err := api.AuthTestContext(ctx)
	if err != nil {
		bad("check "+a.Config.BotTokenEnv+" holds the app's current bot token (xoxb-…), and that the app is installed in the workspace",
			"Slack refused the bot token from %s: %v", a.Config.BotTokenEnv, err)
		return out
	}
	ok("bot token (%s) is valid: workspace %q, bot user %s (%s)", a.Config.BotTokenEnv, auth.Team, auth.User, auth.UserID)

	switch a.Config.Mode {
	case "socket":
		app, err := a.AppClient()
		if err == nil {
			_, _, err = app.StartSocketModeContext(ctx)
			if err != nil {
				err = fmt.Errorf("Slack refused the app-level token from %s: %w", a.Config.AppTokenEnv, err)
			}
		}
		if err != nil {
			bad("make an app-level token with scope connections:write (Basic Information → App-Level Tokens), enable Socket Mode, and export it as "+a.Config.AppTokenEnv, "%v", err)
		} else {
			ok("Socket Mode: the app-level token (%s) opens a connection", a.Config.AppTokenEnv)
		}
	default:
		if _, err := a.SigningSecret(); err != nil {
			bad("export the signing secret (Basic Information → App Credentials → Signing Secret)", "%v", err)
		} else {
			ok("signing secret (%s) is set; Slack must post interactions to https://<gateway>%s", a.Config.SigningSecretEnv, a.Config.InteractionsPath)
		}
	}

	principals := map[string]config.Principal{}
	for _, p := range cfg.Principals {
		principals[p.Name] = p
	}
	checkedUser := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(cfg.ApproverGroups)) {
		g := cfg.ApproverGroups[name]
		if g == nil {
			continue
		}
		field := "approver_groups." + name
		if g.SlackChannel == "" {
			ok("%s has no slack_channel: its requests are decided on /approvals or with airlock approvals", field)
			continue
		}
		ch, err := api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: g.SlackChannel})
		switch {
		case err != nil:
			bad(fmt.Sprintf("check the channel ID (channel details → bottom of the About tab: C…), and invite the bot to it (/invite @%s)", auth.User),
				"%s.slack_channel %s: %v", field, g.SlackChannel, slackErr(err))
		case ch.IsArchived:
			bad("unarchive the channel or name another one", "%s.slack_channel %s (#%s) is archived", field, g.SlackChannel, ch.Name)
		case !ch.IsMember:
			bad(fmt.Sprintf("invite the bot: /invite @%s in #%s", auth.User, ch.Name),
				"%s.slack_channel %s (#%s): the bot is not a member, so it cannot post requests there", field, g.SlackChannel, ch.Name)
		default:
			ok("%s.slack_channel %s is #%s and the bot is in it", field, g.SlackChannel, ch.Name)
		}
		for _, m := range g.Members {
			if checkedUser[m] {
				continue
			}
			checkedUser[m] = true
			p := principals[m]
			if p.SlackUserID == "" {
				bad("set principals[].slack_user_id of "+m+" to their Slack member ID (profile → ⋮ → Copy member ID)",
					"%s is in %s but has no slack_user_id: their clicks in Slack would be refused", m, field)
				continue
			}
			u, err := api.GetUserInfoContext(ctx, p.SlackUserID)
			switch {
			case err != nil:
				bad("check the member ID (profile → ⋮ → Copy member ID: U…)", "%s's slack_user_id %s: %v", m, p.SlackUserID, slackErr(err))
			case u.Deleted:
				bad("remove "+m+" from the group, or give them an active account", "%s's slack_user_id %s (@%s) is deactivated", m, p.SlackUserID, u.Name)
			case u.IsBot:
				bad("use the member ID of a person", "%s's slack_user_id %s (@%s) is a bot", m, p.SlackUserID, u.Name)
			default:
				ok("%s is Slack user %s (@%s)", m, p.SlackUserID, u.Name)
			}
		}
	}
	return out
}

// slackErr names a Slack API error the way its docs do.
func slackErr(err error) error {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "channel_not_found":
			return errors.New("channel_not_found (no such channel, or a private one the bot is not in)")
		case "user_not_found":
			return errors.New("user_not_found (no such member in this workspace)")
		case "missing_scope":
			return errors.New("missing_scope (add the bot scopes airlock slack manifest lists, then reinstall the app)")
		}
	}
	return err
}
