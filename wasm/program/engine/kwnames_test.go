package engine

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/wasm/program/wire"
)

// TestArgumentNamesThatAreNotIdentifiers: a tool's parameter whose name
// no keyword argument can spell ("max-bytes", "from") is passed with
// **{...}, as the stubs show it quoted; the tool gets the names as given.
// A name given twice (path=..., **{"path": ...}) is refused before the
// call, never sent with the key repeated.
func TestArgumentNamesThatAreNotIdentifiers(t *testing.T) {
	var got []string
	h := newHost(t, func(m wire.GuestMessage) wire.Reply {
		got = append(got, string(m.Args))
		return wire.Reply{ID: m.ID, Outcome: "ok", Result: json.RawMessage(`1`)}
	})
	d := run(t, `
fs.read_file(path="/a", **{"max-bytes": 10, "from": "start"})
r = attempt(fs.read_file, path="/b", **{"path": "/c"})
result = [r.ok, r.error]
`, h)
	if d.Outcome != wire.OutcomeOK {
		t.Fatalf("done = %+v", d)
	}
	if len(got) != 1 || got[0] != `{"path":"/a","max-bytes":10,"from":"start"}` {
		t.Errorf("the tool got %q, want one call with the three names", got)
	}
	if r := string(d.Result); !strings.Contains(r, `false`) || !strings.Contains(r, `argument \"path\" is given more than once`) || !strings.Contains(r, "line 3") {
		t.Errorf("result %s: want the repeated name refused, with its line", r)
	}
}
