package gateway

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func collect(t *testing.T, s *eventStore, session, stream string, index int) ([]string, error) {
	t.Helper()
	var out []string
	for d, err := range s.After(context.Background(), session, stream, index) {
		if err != nil {
			return out, err
		}
		out = append(out, string(d))
	}
	return out, nil
}

func TestEventStoreBounds(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	s := newEventStore(10, time.Minute)
	s.now = func() time.Time { return now }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Open(ctx, "a", "1"))
	must(s.Append(ctx, "a", "1", nil)) // a priming event: index 0
	must(s.Append(ctx, "a", "1", []byte("1234")))
	must(s.Append(ctx, "a", "1", []byte("5678")))
	if got, err := collect(t, s, "a", "1", 0); err != nil || !cmp.Equal(got, []string{"1234", "5678"}) {
		t.Fatalf("after 0: %q, %v", got, err)
	}
	if got, err := collect(t, s, "a", "1", 2); err != nil || len(got) != 0 {
		t.Fatalf("after the last: %q, %v; want nothing", got, err)
	}
	if got, err := collect(t, s, "a", "1", 99); err != nil || len(got) != 0 {
		t.Fatalf("after an index never sent: %q, %v; want nothing", got, err)
	}

	// Past 10 bytes the oldest go, across streams and sessions.
	must(s.Append(ctx, "b", "1", []byte("abcd")))
	if _, err := collect(t, s, "a", "1", 0); !errors.Is(err, mcp.ErrEventsPurged) {
		t.Errorf("resume from before a dropped event: %v; want ErrEventsPurged, not a gap", err)
	}
	if got, err := collect(t, s, "a", "1", 1); err != nil || !cmp.Equal(got, []string{"5678"}) {
		t.Errorf("after 1: %q, %v", got, err)
	}
	if s.bytes > 10 {
		t.Errorf("%d bytes kept, bound 10", s.bytes)
	}
	// An event bigger than the bound is kept alone: the stream about to
	// send it must be able to replay it.
	must(s.Append(ctx, "b", "1", []byte(strings.Repeat("x", 50))))
	if got, err := collect(t, s, "b", "1", 0); err != nil || len(got) != 1 || len(got[0]) != 50 {
		t.Errorf("the big event: %d events, %v", len(got), err)
	}

	// Age: a minute later nothing is resumable, even with no new appends.
	now = now.Add(time.Minute + time.Second)
	if _, err := collect(t, s, "b", "1", 0); !errors.Is(err, mcp.ErrEventsPurged) {
		t.Errorf("a stale event: %v; want ErrEventsPurged", err)
	}
	if s.bytes != 0 {
		t.Errorf("%d bytes kept after every event aged out", s.bytes)
	}

	// A closed session's events are freed at once and its stale entries
	// in the age order are not counted twice.
	must(s.Append(ctx, "c", "1", []byte("12")))
	must(s.Append(ctx, "d", "1", []byte("34")))
	must(s.SessionClosed(ctx, "c"))
	if s.bytes != 2 {
		t.Errorf("%d bytes after closing c, want 2", s.bytes)
	}
	if _, err := collect(t, s, "c", "1", -1); err == nil || !strings.Contains(err.Error(), "no events") {
		t.Errorf("a closed session's stream: %v; want no events", err)
	}
	now = now.Add(2 * time.Minute)
	must(s.Append(ctx, "e", "1", []byte("5")))
	if s.bytes != 1 {
		t.Errorf("%d bytes after the rest aged out, want 1", s.bytes)
	}
	if _, err := collect(t, s, "nobody", "x", -1); err == nil {
		t.Error("an unknown session's stream resumed without an error")
	}
}

func TestPrimeWriter(t *testing.T) {
	prime := "event: prime\nid: S_0\ndata: \n\n"
	msg := "event: message\nid: S_1\ndata: {}\n\n"
	for _, tt := range []struct {
		name   string
		hold   bool
		writes []string
		// before is what the client has after the first write (for hold:
		// nothing, so no header is decided yet).
		before, want string
	}{
		{name: "adds retry", writes: []string{prime, msg},
			before: "event: prime\nid: S_0\nretry: 1000\ndata: \n\n", want: "event: prime\nid: S_0\nretry: 1000\ndata: \n\n" + msg},
		{name: "held until the next write", hold: true, writes: []string{prime, msg},
			before: "", want: "event: prime\nid: S_0\nretry: 1000\ndata: \n\n" + msg},
		{name: "held and released at the end", hold: true, writes: []string{prime},
			before: "", want: "event: prime\nid: S_0\nretry: 1000\ndata: \n\n"},
		{name: "not a priming event first", writes: []string{msg, prime}, before: msg, want: msg + prime},
		{name: "a prime without its id line's end", writes: []string{"event: prime\nid: S_0"}, before: "event: prime\nid: S_0", want: "event: prime\nid: S_0"},
		{name: "JSON", writes: []string{`{"jsonrpc":"2.0"}`}, before: `{"jsonrpc":"2.0"}`, want: `{"jsonrpc":"2.0"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			p := &primeWriter{ResponseWriter: rec, hold: tt.hold}
			for i, w := range tt.writes {
				n, err := p.Write([]byte(w))
				if n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v; want %d", n, err, len(w))
				}
				p.Flush()
				if i == 0 {
					if got := rec.Body.String(); got != tt.before {
						t.Errorf("after the first write: %q, want %q", got, tt.before)
					}
					if tt.hold && rec.Flushed {
						t.Error("flushed (headers decided) while the priming event was held")
					}
				}
			}
			p.release()
			if got := rec.Body.String(); got != tt.want {
				t.Errorf("body %q, want %q", got, tt.want)
			}
		})
	}
}
