package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/airlock-run/airlock/api"
)

func tableOf(names ...string) []api.ProgramTool {
	out := make([]api.ProgramTool, len(names))
	for i, n := range names {
		out[i] = api.ProgramTool{Name: n}
	}
	return programTools(out)
}

func namesOf(tools []api.ProgramTool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name + " -> " + t.Module + "." + t.Function
	}
	return out
}

func TestProgramNames(t *testing.T) {
	for _, tc := range []struct{ exposed, module, function string }{
		{"filesystem__read_text_file", "filesystem", "read_text_file"},
		{"echo", ProgramDefaultModule, "echo"},
		{"a__b__c", "a", "b__c"}, // split at the first "__"
		{"my-server__get.item", "my_server", "get_item"},
		{"9lives__2do", "_9lives", "_2do"},
		{"json__dump", "json_", "dump"},             // a builtin: the module would shadow it
		{"print__print", "print_", "print"},         // an attribute shadows nothing
		{"if__while", "if_", "while_"},              // keywords, both parts
		{"try__class", "try_", "class_"},            // reserved words
		{"result__x", "result_", "x"},               // the runner reads result
		{"None__True", "None_", "True"},             // universe
		{"münchen__grüße", "m_nchen", "gr__e"},      // one "_" per character, not per byte
		{"日本__ツール", "__", "___"},                    // all replaced
		{"__tool", "_", "tool"},                     // empty server
		{"server__", "server", "_"},                 // empty tool
		{"", ProgramDefaultModule, "_"},             // empty name
		{"lambda", ProgramDefaultModule, "lambda_"}, // no server, a keyword
	} {
		got := tableOf(tc.exposed)[0]
		if got.Module != tc.module || got.Function != tc.function {
			t.Errorf("%q -> %s.%s, want %s.%s", tc.exposed, got.Module, got.Function, tc.module, tc.function)
		}
	}
}

// TestProgramNameCollisions: names that sanitize alike, or alike but for
// case, are told apart in the order of their exposed names, whatever
// order they come in.
func TestProgramNameCollisions(t *testing.T) {
	want := []string{
		"FS__Read -> FS.Read",
		"fs__a-b -> fs.a_b",
		"fs__a.b -> fs.a_b_2",
		"fs__a_b -> fs.a_b_3",
		"fs__a_b_2 -> fs.a_b_2_2", // its own name was taken by the collision before it
		"fs__read -> fs.read_2",   // FS.Read, case folded
		"fs__ä_b -> fs.__b",
		"fs__ö_b -> fs.__b_2",
	}
	in := []string{"fs__read", "fs__a_b_2", "fs__ö_b", "fs__a_b", "FS__Read", "fs__a.b", "fs__ä_b", "fs__a-b"}
	for i := 0; i < len(in); i++ { // every rotation of the input gives the same table
		rot := append(append([]string(nil), in[i:]...), in[:i]...)
		if diff := cmp.Diff(want, namesOf(tableOf(rot...))); diff != "" {
			t.Fatalf("rotation %d (-want +got):\n%s", i, diff)
		}
	}
	// Every module.function is unique, case folded.
	seen := map[string]bool{}
	for _, tl := range tableOf(append(in, "Fs__READ", "fS__Read_2", "FS__A_B")...) {
		k := strings.ToLower(tl.Module + "." + tl.Function)
		if seen[k] {
			t.Fatalf("%s.%s twice (case folded)", tl.Module, tl.Function)
		}
		seen[k] = true
	}
}

// TestProgramNamesKeepTheToolFields: naming sorts and names, nothing else.
func TestProgramNamesKeepTheToolFields(t *testing.T) {
	in := []api.ProgramTool{
		{Name: "b__x", Server: "b", UpstreamTool: "x", Spec: api.ToolSpec{Idempotent: true}},
		{Name: "a__y", Server: "a", UpstreamTool: "y"},
	}
	got := programTools(in)
	want := []api.ProgramTool{
		{Name: "a__y", Module: "a", Function: "y", Server: "a", UpstreamTool: "y"},
		{Name: "b__x", Module: "b", Function: "x", Server: "b", UpstreamTool: "x", Spec: api.ToolSpec{Idempotent: true}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	if in[0].Name != "b__x" || in[0].Module != "" {
		t.Fatal("programTools changed its input")
	}
}
