package slack

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestSlackHeldResult: the message about a held result (guard.results:
// require_approval) asks whether to deliver it, says the call ran and
// names the findings, shows the call's arguments masked, and offers no
// edit; the value is nowhere in it.
func TestSlackHeldResult(t *testing.T) {
	secret := "ghp_" + strings.Repeat("Zq7", 12) // assembled: never a literal in the repository
	n := api.ApprovalNotice{RequestID: "t1~c1/result", TaskID: "t1", CallID: api.ResultApprovalCallID("c1"), Tool: "fs__read_text_file",
		Principal: "alice", Group: "sec", Quorum: 1, ApprovalEdits: api.ApprovalEdits{NoEdits: true}, Digest: "abc",
		Reason:    "the call ran; approve delivering its result: the result of fs__read_text_file holds github-token at content[0].text (guard.results: require_approval; the values are masked, and the history keeps them only sealed)",
		Arguments: json.RawMessage(`{"path":"/srv/ci.conf","token":"` + secret + `"}`), Redact: []string{"token"}}
	fallback, blocks := RenderRequest(n)
	all := fallback + blocksJSON(t, blocks)
	for _, w := range []string{"Deliver the result of fs__read_text_file?", "the call ran; approve delivering its result", "github-token at content[0].text",
		"guard.results: require_approval", "/srv/ci.conf"} {
		if !strings.Contains(all, w) {
			t.Errorf("the message lacks %q:\n%s", w, all)
		}
	}
	if strings.Contains(all, secret) {
		t.Errorf("the message shows the value:\n%s", all)
	}
	if strings.Contains(all, `"action_id":"`+ActionEdit+`"`) {
		t.Error("the message offers an edit of a result")
	}
}
