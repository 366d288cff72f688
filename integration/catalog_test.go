package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/config"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/manifests"
)

// A generated catalog: 10 upstreams × 10 objects × 5 verbs = 500 tools.
var catalogServices = []struct {
	name, title string
	objects     []string
}{
	{"github", "GitHub", []string{"issue", "pull_request", "repository", "branch", "release", "comment", "label", "milestone", "webhook", "workflow_run"}},
	{"jira", "Jira", []string{"ticket", "sprint", "epic", "board", "project", "worklog", "attachment", "component", "version", "filter"}},
	{"slack", "Slack", []string{"message", "channel", "reaction", "reminder", "user_group", "pin", "bookmark", "file", "emoji", "status"}},
	{"s3", "Amazon S3 storage", []string{"bucket", "object", "bucket_policy", "lifecycle_rule", "multipart_upload", "access_point", "inventory", "replication", "tag", "presigned_url"}},
	{"postgres", "the PostgreSQL database", []string{"table", "index", "row", "schema", "role", "extension", "view", "trigger", "sequence", "backup"}},
	{"kubernetes", "the Kubernetes cluster", []string{"pod", "deployment", "service", "namespace", "config_map", "secret", "ingress", "cron_job", "node", "persistent_volume"}},
	{"stripe", "Stripe billing", []string{"customer", "invoice", "payment", "refund", "subscription", "coupon", "payout", "product", "price", "dispute"}},
	{"calendar", "Google Calendar", []string{"event", "calendar", "attendee", "reminder_rule", "availability", "room", "recurrence", "invitation", "time_zone", "agenda"}},
	{"gmail", "Gmail", []string{"email", "draft", "thread", "mail_label", "filter_rule", "attachment_file", "contact", "signature", "vacation_responder", "forwarding_address"}},
	{"drive", "Google Drive", []string{"document", "folder", "spreadsheet", "presentation", "permission", "shared_drive", "revision", "shortcut", "trash_item", "file_comment"}},
}

var catalogVerbs = []struct{ verb, phrase string }{
	{"create", "Create a new"}, {"delete", "Permanently delete a"}, {"list", "List every"}, {"get", "Get the details of one"}, {"update", "Change the fields of an existing"},
}

// catalogQueries are what an agent might ask for, written from the tools'
// descriptions in other words, with the tool that answers each.
var catalogQueries = []struct{ query, want string }{
	{"open a new issue in the GitHub repository", "github__create_issue"},
	{"show me the pull request details on GitHub", "github__get_pull_request"},
	{"remove a git branch from GitHub", "github__delete_branch"},
	{"publish a new release on GitHub", "github__create_release"},
	{"all labels of the GitHub repository", "github__list_label"},
	{"edit a milestone on GitHub", "github__update_milestone"},
	{"which workflow runs are there on GitHub", "github__list_workflow_run"},
	{"file a new ticket in Jira", "jira__create_ticket"},
	{"close out and delete the Jira epic", "jira__delete_epic"},
	{"log work hours: add a worklog in Jira", "jira__create_worklog"},
	{"what sprints does Jira have", "jira__list_sprint"},
	{"details of one Jira project", "jira__get_project"},
	{"change a saved Jira filter", "jira__update_filter"},
	{"post a message to Slack", "slack__create_message"},
	{"all Slack channels", "slack__list_channel"},
	{"add a reaction to a Slack message", "slack__create_reaction"},
	{"set my Slack status", "slack__update_status"},
	{"remove a Slack reminder", "slack__delete_reminder"},
	{"which user groups exist in Slack", "slack__list_user_group"},
	{"make an S3 bucket", "s3__create_bucket"},
	{"upload an object to S3 storage", "s3__create_object"},
	{"generate a presigned URL for S3", "s3__create_presigned_url"},
	{"change the S3 bucket policy", "s3__update_bucket_policy"},
	{"list lifecycle rules of S3 storage", "s3__list_lifecycle_rule"},
	{"add a table to the PostgreSQL database", "postgres__create_table"},
	{"drop an index in PostgreSQL", "postgres__delete_index"},
	{"insert a row into a PostgreSQL table", "postgres__create_row"},
	{"take a backup of the PostgreSQL database", "postgres__create_backup"},
	{"what extensions are installed in PostgreSQL", "postgres__list_extension"},
	{"restart by deleting a Kubernetes pod", "kubernetes__delete_pod"},
	{"scale a Kubernetes deployment", "kubernetes__update_deployment"},
	{"list the namespaces of the Kubernetes cluster", "kubernetes__list_namespace"},
	{"read a Kubernetes secret", "kubernetes__get_secret"},
	{"schedule a cron job in Kubernetes", "kubernetes__create_cron_job"},
	{"add a customer in Stripe", "stripe__create_customer"},
	{"issue a refund through Stripe", "stripe__create_refund"},
	{"cancel a Stripe subscription", "stripe__delete_subscription"},
	{"all unpaid Stripe invoices", "stripe__list_invoice"},
	{"look up a payment dispute in Stripe", "stripe__get_dispute"},
	{"book a meeting event in Google Calendar", "calendar__create_event"},
	{"reschedule a calendar event", "calendar__update_event"},
	{"check availability in Google Calendar", "calendar__get_availability"},
	{"invite an attendee to the calendar event", "calendar__create_attendee"},
	{"send an email with Gmail", "gmail__create_email"},
	{"save a draft in Gmail", "gmail__create_draft"},
	{"turn on the Gmail vacation responder", "gmail__update_vacation_responder"},
	{"read an email thread in Gmail", "gmail__get_thread"},
	{"create a folder in Google Drive", "drive__create_folder"},
	{"share a Google Drive document: add a permission", "drive__create_permission"},
	{"empty the Google Drive trash", "drive__delete_trash_item"},
}

// catalogUpstream is one generated MCP server with 50 tools.
func catalogUpstream(t *testing.T, svc int) (*manifests.Manifest, *httptest.Server) {
	t.Helper()
	s := catalogServices[svc]
	srv := mcp.NewServer(&mcp.Implementation{Name: s.name, Version: "1"}, nil)
	m := &manifests.Manifest{File: filepath.Join(t.TempDir(), s.name+".yaml"), Tools: map[string]*manifests.Tool{}}
	for _, o := range s.objects {
		human := strings.ReplaceAll(o, "_", " ")
		for _, v := range catalogVerbs {
			name := v.verb + "_" + o
			desc := fmt.Sprintf("%s %s in %s.", v.phrase, human, s.title)
			props := map[string]any{"id": map[string]any{"type": "string", "description": "the " + human + " ID"}}
			if v.verb == "create" || v.verb == "update" {
				props["fields"] = map[string]any{"type": "object", "description": "the " + human + "'s fields"}
			}
			schema := map[string]any{"type": "object", "properties": props}
			srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: schema},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "did " + s.name + " " + name}}}, nil
				})
			side, risk := []manifests.SideEffect{manifests.SideEffectRead}, manifests.RiskLow
			if v.verb != "list" && v.verb != "get" {
				side = []manifests.SideEffect{manifests.SideEffectWrite}
			}
			m.Tools[name] = &manifests.Tool{Description: desc, SideEffects: side, DataAccessLevel: manifests.DataInternal, Risk: risk,
				Timeout: manifests.Duration(10 * time.Second)}
		}
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	m.Server = manifests.Server{Name: s.name, HTTP: &manifests.HTTPServer{URL: hs.URL}}
	return m, hs
}

// TestCatalogSearch measures a 500-tool catalog over 10 upstreams: the
// size of tools/list in both modes and whether airlock_find_tools puts the
// right tool in its top 3 for 50 queries; and checks that a principal
// neither finds nor calls through the meta-tools what it could not call
// directly.
func TestCatalogSearch(t *testing.T) {
	t.Parallel()
	var ms []*manifests.Manifest
	for i := range catalogServices {
		m, _ := catalogUpstream(t, i)
		ms = append(ms, m)
	}
	dir := identity.New(&config.Config{
		Roles: map[string]*config.Role{
			"all":    {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"*"}},
			"github": {Permissions: []string{"*"}, DataAccessLevel: manifests.DataRestricted, Tools: []string{"github__*"}},
		},
		Principals: []config.Principal{
			{Name: "alice", Roles: []string{"all"}, APIKeySHA256: []string{identity.HashKey("alice-key")}},
			{Name: "gh", Roles: []string{"github"}, APIKeySHA256: []string{identity.HashKey("gh-key")}},
		},
	})
	full := newStack(t, stackOptions{manifests: ms, directory: dir})
	search := newStack(t, stackOptions{manifests: ms, directory: dir, catalog: gateway.CatalogSearch})

	listBytes := func(s *stack) (int, []string) {
		cs := connectURL(t, s.url, bearer("alice-key"))
		var tools []*mcp.Tool
		waitFor(t, "500 tools", time.Minute, func() bool {
			tools = tools[:0]
			for tl, err := range cs.Tools(context.Background(), nil) {
				if err != nil {
					t.Fatal(err)
				}
				tools = append(tools, tl)
			}
			if s == search {
				return len(tools) > 0 && len(s.gw.ToolNames()) >= 500
			}
			return len(tools) >= 503
		})
		b, _ := json.Marshal(map[string]any{"tools": tools})
		var names []string
		for _, tl := range tools {
			names = append(names, tl.Name)
		}
		return len(b), names
	}
	fullBytes, fullNames := listBytes(full)
	searchBytes, searchNames := listBytes(search)
	if !slices.IsSorted(fullNames) {
		t.Errorf("tools/list is not in a deterministic (sorted) order")
	}
	if slices.ContainsFunc(searchNames, func(n string) bool { return strings.Contains(n, "__") }) ||
		!slices.Contains(searchNames, gateway.ToolFindTools) || !slices.Contains(searchNames, gateway.ToolCallTool) {
		t.Errorf("search mode lists %v", searchNames)
	}
	t.Logf("tools/list: full %d tools, %d bytes (~%d tokens); search %d tools %v, %d bytes (~%d tokens)",
		len(fullNames), fullBytes, fullBytes/4, len(searchNames), searchNames, searchBytes, searchBytes/4)
	// The built-in tools (state, task) are listed in both modes; search
	// mode must still be a small fraction of the full catalog.
	if searchBytes*10 > fullBytes {
		t.Errorf("search mode's tools/list is %d bytes, more than a tenth of full mode's %d", searchBytes, fullBytes)
	}

	cs := connectURL(t, search.url, bearer("alice-key"))
	top1, top3 := 0, 0
	var misses []string
	for _, q := range catalogQueries {
		res := call(t, cs, gateway.ToolFindTools, map[string]any{"query": q.query, "limit": 3}, "")
		if res.IsError {
			t.Fatalf("find %q: %s", q.query, text(res))
		}
		var out struct{ Tools []gateway.FoundTool }
		if err := json.Unmarshal([]byte(mustJSON(t, res.StructuredContent)), &out); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ft := range out.Tools {
			got = append(got, ft.Name)
		}
		switch i := slices.Index(got, q.want); {
		case i == 0:
			top1++
			top3++
		case i > 0:
			top3++
		default:
			misses = append(misses, fmt.Sprintf("%q → %v (want %s)", q.query, got, q.want))
		}
	}
	t.Logf("airlock_find_tools over %d queries: right tool first %d, in the top 3 %d", len(catalogQueries), top1, top3)
	for _, m := range misses {
		t.Logf("miss: %s", m)
	}
	if top3 < 45 {
		t.Errorf("the right tool is in the top 3 for only %d of %d queries", top3, len(catalogQueries))
	}

	// airlock_call_tool runs the same pipeline as a direct call.
	res := call(t, cs, gateway.ToolCallTool, map[string]any{"name": "jira__create_ticket", "arguments": map[string]any{"id": "T-1"}}, "")
	if res.IsError || !strings.Contains(text(res), "did jira create_ticket") {
		t.Fatalf("call through the meta-tool: %q", text(res))
	}
	if res := call(t, cs, gateway.ToolCallTool, map[string]any{"name": "jira__create_ticket", "arguments": map[string]any{"id": 7}}, ""); !res.IsError ||
		!strings.Contains(text(res), "input schema") {
		t.Errorf("bad arguments through the meta-tool: %q", text(res))
	}

	// gh may call github__* only: it neither finds nor calls anything else.
	gh := connectURL(t, search.url, bearer("gh-key"))
	res = call(t, gh, gateway.ToolFindTools, map[string]any{"query": "file a new ticket in Jira", "limit": 20}, "")
	if strings.Contains(mustJSON(t, res.StructuredContent), "jira__") {
		t.Errorf("gh found a Jira tool: %s", text(res))
	}
	res = call(t, gh, gateway.ToolCallTool, map[string]any{"name": "jira__create_ticket", "arguments": map[string]any{"id": "T-2"}}, "")
	if !res.IsError || !strings.Contains(text(res), "no tool") {
		t.Errorf("gh called a Jira tool through the meta-tool: %q", text(res))
	}
	// Directly, the tool answers as a name that does not exist (issue 25).
	if _, err := gh.CallTool(context.Background(), &mcp.CallToolParams{Name: "jira__create_ticket", Arguments: map[string]any{"id": "T-3"}}); err == nil ||
		!strings.Contains(err.Error(), `unknown tool "jira__create_ticket"`) {
		t.Errorf("gh calling a Jira tool directly: %v; want the answer to an unknown tool", err)
	}
	res = call(t, gh, gateway.ToolCallTool, map[string]any{"name": "github__create_issue", "arguments": map[string]any{"id": "I-1"}}, "")
	if res.IsError || !strings.Contains(text(res), "did github create_issue") {
		t.Errorf("gh calling its own tool through the meta-tool: %q", text(res))
	}
}
