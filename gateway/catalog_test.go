package gateway

import (
	"context"
	"slices"
	"testing"

	"github.com/airlock-run/airlock/api"
)

// TestToolsListPaginated: with a page size, tools/list answers in pages
// with a cursor, in the same (sorted) order every time, and the pages
// together are the whole list.
func TestToolsListPaginated(t *testing.T) {
	cs := connectMemory(t, newTestGateway(t, &fakeTemporal{}, Options{PageSize: 2}))
	ctx := context.Background()
	first, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Tools) != 2 || first.NextCursor == "" {
		t.Fatalf("first page: %d tools, cursor %q; want 2 and a cursor", len(first.Tools), first.NextCursor)
	}
	var names []string
	for tl, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tl.Name)
	}
	want := []string{ToolAwait, ToolRollback, ToolStatus, api.ToolStateGet, api.ToolStateSet, api.ToolStateDelete, "counter__echo"}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("all pages: %v, want %v (sorted)", names, want)
	}
	if first.Tools[0].Name != want[0] || first.Tools[1].Name != want[1] {
		t.Errorf("first page %s, %s: not the start of the sorted list", first.Tools[0].Name, first.Tools[1].Name)
	}
}
