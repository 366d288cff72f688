package activities

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/temporal"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/internal/exchange"
)

// actingTools records the user token it was asked to act with and the
// calls it ran.
type actingTools struct {
	refuse error
	got    string
	typ    string
	ran    int
}

func (f *actingTools) ActAs(ctx context.Context, server string, subject exchange.Grant, principal string) (context.Context, *exchange.Token, error) {
	f.got, f.typ = subject.Token, subject.Type
	if f.refuse != nil {
		return ctx, nil, f.refuse
	}
	return ctx, &exchange.Token{AccessToken: "upstream-token", Scopes: []string{"tickets.write"}, Audience: "tickets"}, nil
}

func (f *actingTools) CallTool(context.Context, string, string, json.RawMessage) (*mcp.CallToolResult, error) {
	f.ran++
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
}

// TestCallToolActsAsSubject: the activity opens the sealed token with the
// worker's key and acts with it, recording who acted and not the token; a
// grant that cannot be used is a non-retryable UserGrant failure and the
// tool never runs.
func TestCallToolActsAsSubject(t *testing.T) {
	key, _ := exchange.NewKey()
	other, _ := exchange.NewKey()
	id := exchange.Identity{Principal: "alice@corp", Issuer: "https://idp", Subject: "alice", Expiry: time.Now().Add(time.Hour)}
	sealed, err := exchange.SealSubject(key.PublicKey(), "t1", "alice-token", id)
	if err != nil {
		t.Fatal(err)
	}
	sub := subjectOf(sealed)
	in := api.CallToolInput{TaskID: "t1", CallID: "c1", Server: "tickets", Tool: "whoami", ExposedName: "tickets__whoami", Subject: sub}

	tools := &actingTools{}
	a := &Activities{Tools: tools, SubjectKey: key}
	out, err := a.CallTool(context.Background(), in)
	if err != nil || tools.got != "alice-token" || tools.ran != 1 {
		t.Fatalf("call: %v (acted with %q, ran %d)", err, tools.got, tools.ran)
	}
	if out.ActedAs == nil || out.ActedAs.Subject != "alice" || out.ActedAs.Issuer != "https://idp" || out.ActedAs.Audience != "tickets" {
		t.Fatalf("ActedAs %+v", out.ActedAs)
	}
	if raw, _ := json.Marshal(out); strings.Contains(string(raw), "token\"") || strings.Contains(string(raw), "upstream-token") || strings.Contains(string(raw), "alice-token") {
		t.Fatalf("the output holds a token: %s", raw)
	}

	old, _ := exchange.SealSubject(key.PublicKey(), "t1", "alice-token", exchange.Identity{Principal: "alice@corp", Expiry: time.Now().Add(-time.Second)})
	expired := subjectOf(old)

	// A held grant: the token expired, so the refresh token is exchanged.
	heldSeal, _ := exchange.SealGrant(key.PublicKey(), "t1", "alice-token", "alice-refresh", exchange.Identity{Principal: "alice@corp", Subject: "alice", Expiry: time.Now().Add(-time.Second)})
	held := api.CallToolInput{TaskID: "t1", CallID: "c2", Server: "tickets", Tool: "whoami", Subject: subjectOf(heldSeal)}
	tools = &actingTools{}
	a = &Activities{Tools: tools, SubjectKey: key}
	out, err = a.CallTool(context.Background(), held)
	if err != nil || tools.got != "alice-refresh" || tools.typ != exchange.TokenTypeRefresh || tools.ran != 1 || out.ActedAs == nil || !out.ActedAs.Held {
		t.Fatalf("held grant: %v (acted with %q %s, ran %d, %+v)", err, tools.got, tools.typ, tools.ran, out.ActedAs)
	}
	if raw, _ := json.Marshal(out); strings.Contains(string(raw), "alice-refresh") {
		t.Fatalf("the output holds the refresh token: %s", raw)
	}
	heldRefused := &actingTools{}
	other2 := &actingTools{}
	for _, tc := range []struct {
		name  string
		a     *Activities
		in    api.CallToolInput
		want  error
		tools *actingTools
	}{
		{"no key", &Activities{Tools: &actingTools{}}, in, exchange.ErrNoKey, nil},
		{"other key", &Activities{Tools: &actingTools{}, SubjectKey: other}, in, exchange.ErrWrongKey, nil},
		{"other task", &Activities{Tools: &actingTools{}, SubjectKey: key}, api.CallToolInput{TaskID: "t2", CallID: "c1", Server: "tickets", Tool: "whoami", Subject: sub}, exchange.ErrTampered, nil},
		{"expired", &Activities{Tools: &actingTools{}, SubjectKey: key}, api.CallToolInput{TaskID: "t1", CallID: "c1", Server: "tickets", Tool: "whoami", Subject: expired}, exchange.ErrExpired, nil},
		{"refused", &Activities{Tools: other2, SubjectKey: key}, in, exchange.ErrRefused, other2},
		{"held grant refused", &Activities{Tools: heldRefused, SubjectKey: key}, held, exchange.ErrRefused, heldRefused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.tools != nil {
				tc.tools.refuse = &exchange.GrantError{Principal: "alice@corp", Err: exchange.ErrRefused, Detail: "400 invalid_grant"}
			}
			_, err := tc.a.CallTool(context.Background(), tc.in)
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != api.ErrTypeUserGrant || !appErr.NonRetryable() || !errors.Is(err, tc.want) {
				t.Fatalf("error %v; want a non-retryable %s of %v", err, api.ErrTypeUserGrant, tc.want)
			}
			if strings.Contains(err.Error(), "alice-token") || strings.Contains(err.Error(), "alice-refresh") {
				t.Fatal("the error holds the token")
			}
			if ran := tc.a.Tools.(*actingTools).ran; ran != 0 {
				t.Fatalf("the tool ran %d times", ran)
			}
		})
	}
}

func subjectOf(s *exchange.Sealed) *api.Subject {
	return &api.Subject{Principal: s.Principal, Issuer: s.Issuer, Subject: s.Subject, Scopes: s.Scopes, Expiry: s.Expiry, Held: s.Held, KeyID: s.KeyID, Peer: s.Peer, Sealed: s.Sealed}
}
