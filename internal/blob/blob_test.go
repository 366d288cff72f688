package blob_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/blob/blobtest"
)

// stores opens one store per backend; corrupt replaces a stored object
// behind the store's back.
type backend struct {
	name    string
	open    func(t *testing.T) (*blob.Store, func(ref string, data []byte))
	missing string // what the missing-blob error says about where
}

func backends() []backend {
	return []backend{
		{name: "file", open: func(t *testing.T) (*blob.Store, func(string, []byte)) {
			dir := filepath.Join(t.TempDir(), "blobs")
			s, err := blob.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s, func(ref string, data []byte) {
				name := strings.TrimPrefix(ref, blob.Prefix)
				if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(blob.Key(name))), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "s3", open: func(t *testing.T) (*blob.Store, func(string, []byte)) {
			srv := blobtest.NewS3(t, "airlock-blobs")
			s, err := blob.Open(context.Background(), srv.URL+"&prefix=prod/")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, func(ref string, data []byte) {
				key := "prod/" + blob.Key(strings.TrimPrefix(ref, blob.Prefix))
				// A new object (not an overwrite, which keeps the old
				// object's checksum for the SDK to catch first).
				if _, err := srv.Backend.DeleteObject(srv.Bucket, key); err != nil {
					t.Fatal(err)
				}
				if _, err := srv.Backend.PutObject(srv.Bucket, key, map[string]string{}, bytes.NewReader(data), int64(len(data)), nil); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "mem", open: func(t *testing.T) (*blob.Store, func(string, []byte)) {
			s, err := blob.Open(context.Background(), "mem://")
			if err != nil {
				t.Fatal(err)
			}
			return s, nil
		}},
	}
}

func TestPutGet(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			s, _ := be.open(t)
			data := bytes.Repeat([]byte("previous content\n"), 10000)
			ref, err := s.Put(ctx, data)
			if err != nil || !strings.HasPrefix(ref, blob.Prefix) {
				t.Fatalf("Put = %q, %v", ref, err)
			}
			again, err := s.Put(ctx, data)
			if err != nil || again != ref {
				t.Fatalf("second Put = %q, %v; want the same reference", again, err)
			}
			got, err := s.Get(ctx, ref)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get: %v (%d bytes)", err, len(got))
			}
			empty, err := s.Put(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get(ctx, empty); err != nil || len(got) != 0 {
				t.Fatalf("Get of the empty blob = %q, %v", got, err)
			}

			// Concurrent writers of the same and different values.
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					v := []byte(strings.Repeat("v", i%4+1))
					r, err := s.Put(ctx, v)
					if err != nil {
						t.Error(err)
						return
					}
					if b, err := s.Get(ctx, r); err != nil || !bytes.Equal(b, v) {
						t.Errorf("concurrent Get: %v", err)
					}
				})
			}
			wg.Wait()
		})
	}
}

func TestGetErrors(t *testing.T) {
	ctx := context.Background()
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			s, corrupt := be.open(t)
			ref, err := s.Put(ctx, []byte("hello"))
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				ref, want string
				is        error
			}{
				{"md5:abc", "is not sha256:", nil},
				{blob.Prefix + "zz" + strings.Repeat("0", 62), "is not sha256:", nil},
				{blob.Prefix + strings.Repeat("A", 64), "is not sha256:", nil},
				{blob.Prefix + strings.Repeat("0", 64), "every worker must use the same blob store", blob.ErrNotFound},
			} {
				_, err := s.Get(ctx, tc.ref)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("Get(%q) = %v; want an error mentioning %q", tc.ref, err, tc.want)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Errorf("Get(%q) = %v; want errors.Is %v", tc.ref, err, tc.is)
				}
			}
			if corrupt == nil {
				return
			}
			corrupt(ref, []byte("tampered"))
			if _, err := s.Get(ctx, ref); !errors.Is(err, blob.ErrCorrupt) || !strings.Contains(err.Error(), "no longer matches its hash") {
				t.Errorf("Get of a tampered blob = %v; want ErrCorrupt", err)
			}
		})
	}
}

// A directory written by the store before it had backends (the same
// layout: <dir>/<first two hex digits>/<hex>) stays readable.
func TestFileLayoutUnchanged(t *testing.T) {
	dir := t.TempDir()
	data := []byte("written by an older airlock")
	s, err := blob.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := s.Put(context.Background(), data)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(ref, blob.Prefix)
	b, err := os.ReadFile(filepath.Join(dir, name[:2], name))
	if err != nil || !bytes.Equal(b, data) {
		t.Fatalf("file layout: %v, %q", err, b)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, name[:2]))
	if len(entries) != 1 {
		t.Errorf("want only the blob beside it (no sidecar, no temporary file), got %d entries", len(entries))
	}
	// And via its URL.
	s2, err := blob.Open(context.Background(), blob.FileURL(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s2.Get(context.Background(), ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get through %s: %v", blob.FileURL(dir), err)
	}
}

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"file:///var/lib/airlock/blobs", ""},
		{"s3://bucket?region=eu-west-1", ""},
		{"s3://bucket?endpoint=http://minio:9000&use_path_style=true&prefix=airlock/", ""},
		{"mem://", ""},
		{"/var/lib/airlock/blobs", `scheme "" is not one of file, s3, mem`},
		{"gs://bucket", `scheme "gs" is not one of file, s3, mem`},
		{"file://var/lib/blobs", `names host "var"`},
		{"file:relative", "no absolute directory"},
		{"s3:///prefix", "names no bucket"},
		{"s3://bucket/airlock", "put the key prefix in ?prefix="},
		{"file:///x?create_dir=1", "takes no query parameters"},
		{"%zz", "is not a URL"},
	} {
		err := blob.CheckURL(tc.url)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckURL(%q) = %v; want nil", tc.url, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckURL(%q) = %v; want an error mentioning %q", tc.url, err, tc.want)
		}
	}
}

// An S3 store whose endpoint does not answer fails on use with an error
// naming the store, not at Open (the cluster may come up later).
func TestS3Unreachable(t *testing.T) {
	srv := blobtest.NewS3(t, "b")
	s, err := blob.Open(context.Background(), "s3://b?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	_ = srv
	ctx, cancel := context.WithTimeout(context.Background(), 30e9)
	defer cancel()
	if _, err := s.Put(ctx, []byte("x")); err == nil || !strings.Contains(err.Error(), "blob store s3://b") {
		t.Errorf("Put to an unreachable S3 = %v", err)
	}
}
