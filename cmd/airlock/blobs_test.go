package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-run/airlock/api"
	"github.com/airlock-run/airlock/gateway"
	"github.com/airlock-run/airlock/internal/blob/blobtest"
	"github.com/airlock-run/airlock/internal/identity"
	"github.com/airlock-run/airlock/internal/testenv"
)

// headerRT adds headers to every request.
type headerRT map[string]string

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestS3BlobStoreCapturesAndRollback: with blobs: an s3:// URL (an S3
// server in the test process, spoken to over HTTP by the AWS SDK), the
// worker keeps a large captured pre-image and its compensation in the
// bucket, not the history, and the rollback reads them back from there and
// restores the note.
func TestS3BlobStoreCapturesAndRollback(t *testing.T) {
	buildTestupstream(t) // skipped with -short, like the other stack tests
	srv := blobtest.NewS3(t, "airlock-blobs")
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "airlock.yaml")
	mustWrite(t, cfg, []byte(`manifests: [`+filepath.Join(root, "manifests", "examples", "native.yaml")+`]
blobs: "`+srv.URL+`&prefix=blobs/"
principals:
  - {name: alice, roles: [all], api_key_sha256: [`+identity.HashKey("alice-key")+`]}
roles:
  all: {permissions: ["*"], data_access_level: restricted, tools: ["*"]}
`))
	s := inProcess(t, cfg, roles{embedded: true, worker: true, gateway: true})

	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "s3-test", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: "http://" + s.addr + "/mcp", HTTPClient: &http.Client{Transport: headerRT{"Authorization": "Bearer alice-key", gateway.HeaderTask: "s3-blobs"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	notes := filepath.Join(s.env.dataDir, "notes")
	before := strings.Repeat("the note as it was before the task\n", 3000) // ~100 KiB: over the 64 KiB threshold
	if err := os.WriteFile(filepath.Join(notes, "big.txt"), []byte(before), 0o600); err != nil {
		t.Fatal(err)
	}
	// Again until it succeeds: the module may still be compiling.
	testenv.WaitFor(t, "native__note_write to succeed", 90*time.Second, func() bool {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "native__note_write", Arguments: map[string]any{"name": "big", "content": strings.Repeat("overwritten\n", 9000)}})
		return err == nil && !res.IsError
	})

	// The pre-image and the compensation made from it are in the bucket.
	list, err := srv.Backend.ListBucket(srv.Bucket, &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
		if !strings.HasPrefix(c.Key, "blobs/") || c.Size < 64<<10 {
			t.Errorf("object %s (%d bytes): want large values under the prefix blobs/", c.Key, c.Size)
		}
	}
	if len(keys) != 2 {
		t.Fatalf("bucket holds %q, want the capture and the compensation", keys)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: gateway.ToolRollback, Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var rb api.RollbackResult
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &rb)
	if res.IsError || rb.State != api.StateRolledBack || len(rb.Compensated) != 1 {
		t.Fatalf("rollback: %+v", res)
	}
	if got, _ := os.ReadFile(filepath.Join(notes, "big.txt")); string(got) != before {
		t.Fatalf("after the rollback the note is %d bytes, want its old %d bytes back (from the S3 blob store)", len(got), len(before))
	}
}
