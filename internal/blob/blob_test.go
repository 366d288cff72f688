package blob

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestPutGet(t *testing.T) {
	s, err := New(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("previous content\n"), 10000)
	ref, err := s.Put(data)
	if err != nil || !strings.HasPrefix(ref, Prefix) {
		t.Fatalf("Put = %q, %v", ref, err)
	}
	again, err := s.Put(data)
	if err != nil || again != ref {
		t.Fatalf("second Put = %q, %v; want the same reference", again, err)
	}
	got, err := s.Get(ref)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: %v (%d bytes)", err, len(got))
	}

	// Concurrent writers of the same and different values.
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := []byte(strings.Repeat("v", i%4+1))
			r, err := s.Put(v)
			if err != nil {
				t.Error(err)
				return
			}
			if b, err := s.Get(r); err != nil || !bytes.Equal(b, v) {
				t.Errorf("concurrent Get: %v", err)
			}
		}()
	}
	wg.Wait()
}

func TestGetErrors(t *testing.T) {
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := s.Put([]byte("hello"))
	for _, tc := range []struct{ ref, want string }{
		{"md5:abc", "is not sha256:"},
		{Prefix + "zz" + strings.Repeat("0", 62), "is not sha256:"},
		{Prefix + strings.Repeat("0", 64), "every worker must share this directory"},
	} {
		if _, err := s.Get(tc.ref); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Get(%q) = %v; want an error mentioning %q", tc.ref, err, tc.want)
		}
	}
	name := strings.TrimPrefix(ref, Prefix)
	if err := os.WriteFile(s.path(name), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ref); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Get of a tampered blob = %v", err)
	}
}
