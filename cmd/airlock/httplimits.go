package main

import (
	"net/http"

	"github.com/rs/zerolog"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/httplimit"
	"github.com/airlock-run/airlock/internal/identity"
)

// limitedServer is the HTTP server of a listener of airlock's, bounded by
// the configuration's http section. dir, when set, decides which requests
// are authenticated (valid credentials in the headers); without it none is.
// It raises the open-file limit first and logs it, since every connection
// holds a file descriptor.
func limitedServer(h http.Handler, cfg *config.Config, dir *identity.Directory, log zerolog.Logger) *httplimit.Server {
	c := cfg.HTTP
	lim := httplimit.Limits{
		ReadHeaderTimeout:       c.ReadHeaderTimeout.D(),
		ReadTimeout:             c.ReadTimeout.D(),
		IdleTimeout:             c.IdleTimeout.D(),
		MaxHeaderBytes:          int(c.MaxHeaderBytes),
		MaxUnauthenticatedBody:  int64(c.MaxUnauthenticatedBody),
		MaxUnauthenticatedConns: c.MaxUnauthenticatedConns,
	}.WithDefaults()
	var authenticated func(*http.Request) (*http.Request, bool)
	if dir != nil {
		// The principal it authenticates goes on to the gateway's edge,
		// which then does not authenticate the request again.
		authenticated = gateway.Authenticator(dir)
	}
	logOpenFiles(log, lim)
	return httplimit.New(h, lim, authenticated)
}

// logOpenFiles raises the soft limit on open files to the hard one and
// says what it is; it warns when the limit leaves little room beside the
// unauthenticated connections a flood may hold.
func logOpenFiles(log zerolog.Logger, lim httplimit.Limits) {
	soft, hard, err := httplimit.RaiseOpenFiles()
	switch {
	case err != nil && soft == 0:
		log.Debug().Err(err).Msg("open-file limit unknown")
		return
	case err != nil:
		log.Warn().Err(err).Uint64("soft", soft).Uint64("hard", hard).Msg("open-file limit could not be raised to the hard limit")
	default:
		log.Info().Uint64("soft", soft).Uint64("hard", hard).Msg("open-file limit")
	}
	if need := uint64(2*lim.MaxUnauthenticatedConns + 256); soft < need {
		log.Warn().Uint64("open_files", soft).Int("max_unauthenticated_conns", lim.MaxUnauthenticatedConns).
			Msg("the open-file limit leaves little room for authenticated clients beside http.max_unauthenticated_conns: raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower http.max_unauthenticated_conns")
	}
}
