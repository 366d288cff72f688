package upstream

import (
	"context"
	"net/http"
	"os"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/airlock-run/airlock/manifests"
)

// tokenRequestTimeout bounds one request to an upstream's token endpoint.
const tokenRequestTimeout = 15 * time.Second

// clientCredentials wraps base so that every request to the upstream
// carries an access token airlock obtained itself with the client
// credentials grant (server.http.oauth); golang.org/x/oauth2 caches the
// token and asks for a new one shortly before it expires. A failure to get
// one fails the request, which the supervisor reports as the upstream's
// status reason (the token endpoint's error, never the secret).
func clientCredentials(c *manifests.ClientCredentials, base http.RoundTripper) http.RoundTripper {
	cc := &clientcredentials.Config{
		ClientID:     c.ClientID,
		ClientSecret: os.Getenv(c.ClientSecretEnv),
		TokenURL:     c.TokenURL,
		Scopes:       c.Scopes,
	}
	if c.Resource != "" {
		cc.EndpointParams = map[string][]string{"resource": {c.Resource}}
	}
	// The token endpoint is asked over its own client: not through base,
	// whose requests the send marker tracks.
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, &http.Client{Timeout: tokenRequestTimeout})
	return &oauth2.Transport{Source: cc.TokenSource(ctx), Base: base}
}

// oauthConfigError says what keeps the upstream's client credentials from
// working ("" when nothing does).
func oauthConfigError(h *manifests.HTTPServer) string {
	if h == nil || h.OAuth == nil {
		return ""
	}
	if os.Getenv(h.OAuth.ClientSecretEnv) == "" {
		return "server.http.oauth.client_secret_env: the environment variable " + h.OAuth.ClientSecretEnv + " is not set; set it to the client secret"
	}
	return ""
}
