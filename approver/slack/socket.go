package slack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// SocketModeOptions configure RunSocketMode.
type SocketModeOptions struct {
	// Client carries the bot token and the app-level token
	// (App.AppClient).
	Client *slack.Client
	// Interactions process the clicks, as over HTTP; their SigningSecret
	// is not used (the WebSocket is authenticated by the app-level token).
	// Their Slack client defaults to Client.
	Interactions InteractionOptions
	// PingInterval is how long to wait for Slack's WebSocket pings before
	// reconnecting (default: slack-go's 30s).
	PingInterval time.Duration
}

// RunSocketMode takes Slack clicks over Socket Mode (no public URL needed)
// until ctx is done: each interaction is acknowledged on the socket first,
// then processed exactly as InteractionHandler processes it. It returns nil
// when ctx ends, or why the connection could not be kept (a rejected
// app-level token).
func RunSocketMode(ctx context.Context, o SocketModeOptions) error {
	if o.Client == nil {
		return errors.New("slack socket mode: no Slack client (it needs the app-level token)")
	}
	if o.Interactions.Slack == nil {
		o.Interactions.Slack = o.Client
	}
	h := InteractionHandler(o.Interactions)
	defer func() { _ = h.Close() }()
	log := h.log.With().Str("transport", "socket-mode").Logger()

	opts := []socketmode.Option{socketmode.OptionLog(zerologOutput{log})}
	if o.PingInterval > 0 {
		opts = append(opts, socketmode.OptionPingInterval(o.PingInterval))
	}
	sm := socketmode.New(o.Client, opts...)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- sm.RunContext(rctx) }()

	for {
		select {
		case <-ctx.Done():
			cancel()
			<-runErr
			return nil
		case err := <-runErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("slack socket mode: %w", err)
		case evt := <-sm.Events:
			switch evt.Type {
			case socketmode.EventTypeInteractive:
				ic, ok := evt.Data.(slack.InteractionCallback)
				start := func() {}
				var resp any
				if ok {
					// A submitted modal is checked before the ack, whose
					// payload keeps it open with the problem, as the HTTP
					// answer does.
					if r, s, ours := h.submitView(&ic); ours {
						start = s
						if r != nil {
							resp = r
						}
					} else {
						start = h.accept(&ic) // registered before the ack, for Close
					}
				}
				socketAck(rctx, sm, evt, resp, log)
				start()
			case socketmode.EventTypeEventsAPI, socketmode.EventTypeSlashCommand:
				socketAck(rctx, sm, evt, nil, log) // not ours; Slack retries unacknowledged envelopes
			case socketmode.EventTypeConnected:
				log.Info().Msg("connected to Slack")
			case socketmode.EventTypeConnectionError:
				log.Warn().Interface("error", socketErrText(evt.Data)).Msg("Slack connection failed; retrying")
			case socketmode.EventTypeInvalidAuth:
				cancel()
				<-runErr
				return errors.New("slack socket mode: Slack rejected the app-level token (invalid_auth): check slack.app_token_env's variable holds the xapp-… token with connections:write")
			}
		}
	}
}

// socketAck acknowledges an envelope promptly (with payload: a modal's
// errors, or nil); it gives up after 2s rather than
// block the event loop on a dead connection (Slack redelivers).
func socketAck(ctx context.Context, sm *socketmode.Client, evt socketmode.Event, payload any, log zerolog.Logger) {
	if evt.Request == nil || evt.Request.EnvelopeID == "" {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := sm.AckCtx(actx, evt.Request.EnvelopeID, payload); err != nil {
		log.Warn().Err(err).Msg("could not acknowledge a Socket Mode envelope")
	}
}

func socketErrText(v any) string {
	if e, ok := v.(*slack.ConnectionErrorEvent); ok && e.ErrorObj != nil {
		return e.ErrorObj.Error()
	}
	return fmt.Sprint(v)
}

// zerologOutput adapts zerolog to slack-go's logger (debug lines only).
type zerologOutput struct{ log zerolog.Logger }

func (z zerologOutput) Output(_ int, s string) error {
	z.log.Debug().Msg(strings.TrimSpace(s))
	return nil
}
