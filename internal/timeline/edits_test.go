package timeline

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/airlock-run/airlock/api"
)

// TestEditChangesNameMaskedPaths (issue 25 §11): audit show and --json
// name the masked path an edit changed, also for an edit recorded with
// the old diff ("deletions: "[redacted]" → "[redacted]"").
func TestEditChangesNameMaskedPaths(t *testing.T) {
	mask := json.RawMessage(`"[redacted]"`)
	e := &api.ArgsEdit{By: "bob", Via: "web", Original: json.RawMessage(`{"deletions":[{"line":1,"key":"k1"}]}`),
		Arguments: json.RawMessage(`{"deletions":[{"line":1,"key":"k2"}]}`),
		Changes:   []api.ArgChange{{Path: "deletions", From: mask, To: mask}}}
	b := &builder{}
	cs := &callState{c: &Call{}}
	b.setEdit(cs, e)
	b.finishEdit(cs, []string{"deletions.key"})
	got := cs.c.Edit.Changes
	if len(got) != 1 || got[0].Path != "deletions.0.key" || !got[0].Masked {
		t.Fatalf("changes %+v, want deletions.0.key masked", got)
	}
	evs := editEvents(cs.c, func(_ time.Time, _ int, _, text string, _ map[string]any) event { return event{text: text} })
	if len(evs) != 1 || !strings.Contains(evs[0].text, "deletions.0.key: masked value changed") || strings.Contains(evs[0].text, "k2") {
		t.Errorf("events %+v", evs)
	}
}
