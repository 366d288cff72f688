package catalog

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestTokens(t *testing.T) {
	got := Tokens("github__listIssues: List the open Pull-Requests of a repository (v2)")
	want := []string{"github", "list", "issue", "list", "open", "pull", "request", "repository", "v2"}
	if !slices.Equal(got, want) {
		t.Errorf("Tokens = %v, want %v", got, want)
	}
}

func TestSearchRanksAndFilters(t *testing.T) {
	docs := []Doc{
		{Name: "fs__read_file", Description: "Read a file's contents.", Schema: json.RawMessage(`{"properties":{"path":{"description":"file path"}}}`)},
		{Name: "fs__write_file", Description: "Write contents to a file.", Schema: json.RawMessage(`{"properties":{"path":{},"content":{}}}`)},
		{Name: "git__commit", Description: "Record changes to the repository."},
		{Name: "mail__send", Description: "Send an email message."},
	}
	ix := New(docs)
	hits := ix.Search("write some content into a file", 3, nil)
	if len(hits) == 0 || hits[0].Doc.Name != "fs__write_file" {
		t.Fatalf("hits %+v", hits)
	}
	if got := ix.Search("send an e-mail message", 1, nil); len(got) != 1 || got[0].Doc.Name != "mail__send" {
		t.Errorf("send: %+v", got)
	}
	// keep hides documents; nothing shared means no hit.
	if got := ix.Search("write file", 5, func(n string) bool { return n != "fs__write_file" }); slices.ContainsFunc(got, func(h Hit) bool { return h.Doc.Name == "fs__write_file" }) {
		t.Errorf("keep ignored: %+v", got)
	}
	if got := ix.Search("kubernetes pod", 5, nil); len(got) != 0 {
		t.Errorf("unrelated query found %+v", got)
	}
	// Deterministic: equal scores are ordered by name.
	a := ix.Search("file", 5, nil)
	b := ix.Search("file", 5, nil)
	if len(a) != len(b) || a[0].Doc.Name != b[0].Doc.Name || a[1].Doc.Name != b[1].Doc.Name {
		t.Errorf("order differs: %v %v", a, b)
	}
}

func TestVerbSynonyms(t *testing.T) {
	ix := New([]Doc{
		{Name: "s3__create_bucket", Description: "Create a new bucket."},
		{Name: "s3__delete_bucket", Description: "Permanently delete a bucket."},
		{Name: "s3__list_bucket", Description: "List every bucket."},
	})
	for q, want := range map[string]string{"make a bucket": "s3__create_bucket", "remove the bucket": "s3__delete_bucket", "all buckets": "s3__list_bucket"} {
		if got := ix.Search(q, 1, nil); len(got) != 1 || got[0].Doc.Name != want {
			t.Errorf("%q: %+v, want %s", q, got, want)
		}
	}
}
