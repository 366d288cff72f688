package slack

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/airlock-run/airlock/internal/config"
)

// App is the Slack app of a configuration: its block, the secrets read
// from the environment variables it names, and each group's channel. The
// secrets stay in this process: they are never logged and never enter a
// workflow's input, result or history.
type App struct {
	Config   config.Slack
	Channels map[string]string // approver group -> channel ID

	botToken, signingSecret, appToken string
}

// NewApp reads the Slack app of cfg, getenv giving the environment
// (os.Getenv). It returns nil when cfg has no slack block. Secrets are
// checked when a part needs them (BotClient, SigningSecret, AppClient), so
// each role asks only for what it uses.
func NewApp(cfg *config.Config, getenv func(string) string) *App {
	if cfg.Slack == nil {
		return nil
	}
	a := &App{Config: *cfg.Slack, Channels: map[string]string{}}
	def := func(f *string, v string) {
		if *f == "" {
			*f = v
		}
	}
	// Configurations built in code skip the loader's defaults.
	def(&a.Config.BotTokenEnv, config.DefaultSlackBotTokenEnv)
	def(&a.Config.SigningSecretEnv, config.DefaultSlackSigningSecretEnv)
	def(&a.Config.AppTokenEnv, config.DefaultSlackAppTokenEnv)
	def(&a.Config.Mode, config.DefaultSlackMode)
	def(&a.Config.InteractionsPath, config.DefaultSlackInteractionsPath)
	for name, g := range cfg.ApproverGroups {
		if g != nil && g.SlackChannel != "" {
			a.Channels[name] = g.SlackChannel
		}
	}
	a.botToken = strings.TrimSpace(getenv(a.Config.BotTokenEnv))
	a.signingSecret = strings.TrimSpace(getenv(a.Config.SigningSecretEnv))
	a.appToken = strings.TrimSpace(getenv(a.Config.AppTokenEnv))
	return a
}

func slackMissingEnv(variable, field, what string) error {
	return fmt.Errorf("slack: environment variable %s is not set (slack.%s names it): export the Slack app's %s in airlock's environment, or remove the slack block", variable, field, what)
}

// BotClient is a Web API client with the bot token (chat.postMessage,
// chat.update, chat.postEphemeral).
func (a *App) BotClient() (*slack.Client, error) {
	if a.botToken == "" {
		return nil, slackMissingEnv(a.Config.BotTokenEnv, "bot_token_env", "bot token (xoxb-…)")
	}
	return slack.New(a.botToken, a.options()...), nil
}

// SigningSecret is the secret interaction requests are signed with.
func (a *App) SigningSecret() (string, error) {
	if a.signingSecret == "" {
		return "", slackMissingEnv(a.Config.SigningSecretEnv, "signing_secret_env", "signing secret (Basic Information → App Credentials)")
	}
	return a.signingSecret, nil
}

// AppClient is a client with the bot token and the app-level token, for
// Socket Mode.
func (a *App) AppClient() (*slack.Client, error) {
	if a.appToken == "" {
		return nil, slackMissingEnv(a.Config.AppTokenEnv, "app_token_env", "app-level token (xapp-…, scope connections:write) for Socket Mode")
	}
	if a.botToken == "" {
		return nil, slackMissingEnv(a.Config.BotTokenEnv, "bot_token_env", "bot token (xoxb-…)")
	}
	return slack.New(a.botToken, append(a.options(), slack.OptionAppLevelToken(a.appToken))...), nil
}

// Notifier is the app's Notifier: its bot client, posting to each
// group's channel.
func (a *App) Notifier() (*Notifier, error) {
	api, err := a.BotClient()
	if err != nil {
		return nil, err
	}
	return NewNotifier(api, a.Channels), nil
}

func (a *App) options() []slack.Option {
	opts := []slack.Option{slack.OptionHTTPClient(&http.Client{Timeout: 15 * time.Second})}
	if a.Config.APIURL != "" {
		opts = append(opts, slack.OptionAPIURL(a.Config.APIURL))
	}
	return opts
}
