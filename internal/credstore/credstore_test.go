package credstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-run/airlock/internal/blob"
	"github.com/airlock-run/airlock/internal/blob/blobtest"
	"github.com/airlock-run/airlock/internal/credstore"
)

func keys(t *testing.T, s string) *credstore.Keyring {
	t.Helper()
	k, err := credstore.ParseKeys(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func open(t *testing.T, dir string, k *credstore.Keyring) *credstore.Store {
	t.Helper()
	s, err := credstore.Open(context.Background(), blob.FileURL(dir), k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestParseKeysHostile: every malformed key list is refused with a
// message naming the entry and the fix, never the key.
func TestParseKeysHostile(t *testing.T) {
	good := credstore.NewKey()
	for in, want := range map[string]string{
		"k1":         "entry 1 is not ID:KEY",
		"K1:" + good: `key ID "K1" is not`,
		"k1:" + good + ",k1:" + credstore.NewKey():      `key ID "k1" is listed twice`,
		"k1:" + good[:20]:                               `key "k1" is not 32 bytes`,
		"k1:" + good + "x":                              `key "k1" is not 32 bytes`,
		":" + good:                                      "key ID \"\" is not",
		"k1:" + good + "," + strings.Repeat("x:y,", 20): "keep at most 16",
		"a/b:" + good:                                   `key ID "a/b"`,
	} {
		_, err := credstore.ParseKeys(in)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), credstore.EnvKeys) {
			t.Errorf("ParseKeys(%.30q): %v; want %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), good) {
			t.Errorf("the error repeats the key: %v", err)
		}
	}
	if k, err := credstore.KeysFromEnv(func(string) string { return "" }); k != nil || err != nil {
		t.Fatalf("unset: %v %v", k, err)
	}
}

// TestStoreBindsAndRotates: a credential opens only as the principal and
// upstream it was stored for (an object copied to another user's name
// does not), the file holds no token, and a key rotation keeps every
// credential readable: new key first, old after it, rekey, old removed.
func TestStoreBindsAndRotates(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	k1, k2 := credstore.NewKey(), credstore.NewKey()
	s := open(t, dir, keys(t, "k1:"+k1))
	sec := credstore.Secret{AccessToken: "access-alice-0123456789", RefreshToken: "refresh-alice-0123456789"}
	if err := s.Put(ctx, credstore.Record{Principal: "alice", Upstream: "code", Scopes: []string{"repo"}, Obtained: time.Now()}, sec); err != nil {
		t.Fatal(err)
	}
	rec, got, err := s.Get(ctx, "alice", "code")
	if err != nil || got != sec || rec.KeyID != "k1" || !rec.Refreshable {
		t.Fatalf("get: %+v %+v %v", rec, got, err)
	}
	if _, _, err := s.Get(ctx, "bob", "code"); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("bob: %v", err)
	}
	// Nothing on disk holds the token; copying alice's object to bob's
	// name (or to Alice's, case-folded) opens nothing.
	var files []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			files = append(files, p)
			b, _ := os.ReadFile(p)
			if strings.Contains(string(b), "alice-0123456789") {
				t.Errorf("%s holds the token in the clear", p)
			}
		}
		return nil
	})
	if len(files) != 1 {
		t.Fatalf("files: %v", files)
	}
	raw, _ := os.ReadFile(files[0])
	for _, other := range []string{"bob", "Alice"} {
		if err := s.Put(ctx, credstore.Record{Principal: other, Upstream: "code"}, credstore.Secret{AccessToken: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && p != files[0] {
			_ = os.WriteFile(p, raw, 0o600)
		}
		return nil
	})
	for _, other := range []string{"bob", "Alice"} {
		if _, _, err := s.Get(ctx, other, "code"); !errors.Is(err, credstore.ErrTampered) {
			t.Fatalf("alice's credential copied to %s: %v; want ErrTampered", other, err)
		}
	}
	// Trailing bytes after the object are refused.
	_ = os.WriteFile(files[0], append(append([]byte{}, raw...), []byte(`{"V":1}`)...), 0o600)
	if _, _, err := s.Get(ctx, "alice", "code"); !errors.Is(err, credstore.ErrTampered) {
		t.Fatalf("trailing data: %v", err)
	}
	_ = os.WriteFile(files[0], raw, 0o600)

	// Rotation.
	s2 := open(t, dir, keys(t, "k2:"+k2+",k1:"+k1))
	if _, got, err := s2.Get(ctx, "alice", "code"); err != nil || got != sec {
		t.Fatalf("under k2,k1: %v", err)
	}
	only2 := open(t, dir, keys(t, "k2:"+k2))
	if _, _, err := only2.Get(ctx, "alice", "code"); !errors.Is(err, credstore.ErrKey) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("k1 removed before rekey: %v", err)
	}
	// bob's and Alice's objects are tampered: rekey refuses until they go.
	if _, err := s2.Rekey(ctx); err == nil {
		t.Fatal("rekey with unreadable objects succeeded")
	}
	for _, other := range []string{"bob", "Alice"} {
		if ok, err := s2.Delete(ctx, other, "code"); !ok || err != nil {
			t.Fatalf("delete %s: %v %v", other, ok, err)
		}
	}
	if n, err := s2.Rekey(ctx); err != nil || n != 1 {
		t.Fatalf("rekey: %d %v", n, err)
	}
	if rec, got, err := only2.Get(ctx, "alice", "code"); err != nil || got != sec || rec.KeyID != "k2" {
		t.Fatalf("after rekey, under k2 alone: %+v %v", rec, err)
	}
	// Listing needs no key and shows no token.
	lister := open(t, dir, nil)
	recs, bad, err := lister.List(ctx)
	if err != nil || len(bad) != 0 || len(recs) != 1 || recs[0].Principal != "alice" || recs[0].Scopes[0] != "repo" {
		t.Fatalf("list: %+v %v %v", recs, bad, err)
	}
	if _, _, err := lister.Get(ctx, "alice", "code"); !errors.Is(err, credstore.ErrKey) {
		t.Fatalf("get without keys: %v", err)
	}
	if ok, _ := s.Delete(ctx, "alice", "code"); !ok {
		t.Fatal("delete")
	}
	if ok, _ := s.Delete(ctx, "alice", "code"); ok {
		t.Fatal("second delete found something")
	}
}

// TestTakeOnce: a consent flow is taken at most once, under a burst of
// concurrent takes from two store handles (as two replicas); an expired
// one and a malformed ID are refused.
func TestTakeOnce(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	k := "k1:" + credstore.NewKey()
	a, b := open(t, dir, keys(t, k)), open(t, dir, keys(t, k))
	id, err := a.Begin(ctx, credstore.Pending{Principal: "alice", Upstream: "code", Verifier: "v", Expiry: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !credstore.ValidID(id) {
		t.Fatalf("id %q", id)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins, used := 0, 0
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			p, err := s.Take(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && p.Principal == "alice":
				wins++
			case credstore.IsGone(err):
				used++
			default:
				t.Errorf("take: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins != 1 || used != 31 {
		t.Fatalf("%d takes won, %d refused; want 1 and 31", wins, used)
	}
	if _, err := a.Peek(ctx, id); !errors.Is(err, credstore.ErrUsed) {
		t.Fatalf("peek after take: %v", err)
	}
	id2, _ := a.Begin(ctx, credstore.Pending{Principal: "alice", Upstream: "code", Expiry: time.Now().Add(time.Minute)})
	a.SetClock(func() time.Time { return time.Now().Add(2 * time.Minute) })
	if _, err := a.Take(ctx, id2); !errors.Is(err, credstore.ErrExpired) {
		t.Fatalf("expired: %v", err)
	}
	for _, bad := range []string{"", "x", id2 + "A", strings.Repeat("A", 43) + "\n", "../../etc/passwd"} {
		if _, err := a.Peek(ctx, bad); !errors.Is(err, credstore.ErrNotFound) {
			t.Fatalf("peek %q: %v", bad, err)
		}
	}
}

// TestBeginBounded: calls repeated without consenting (a burst of them,
// concurrent) keep one flow per principal and upstream in the store; only
// the last link works, and another principal's flow is its own.
func TestBeginBounded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, keys(t, "k1:"+credstore.NewKey()))
	var wg sync.WaitGroup
	ids := make([]string, 100)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := s.Begin(ctx, credstore.Pending{Principal: "alice", Upstream: "code", Expiry: time.Now().Add(time.Minute)})
			if err != nil {
				t.Error(err)
			}
			ids[i] = id
		}()
	}
	wg.Wait()
	bobID, err := s.Begin(ctx, credstore.Pending{Principal: "bob", Upstream: "code", Expiry: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	live := 0
	for _, id := range ids {
		if p, err := s.Peek(ctx, id); err == nil && p.Principal == "alice" {
			live++
		} else if !errors.Is(err, credstore.ErrNotFound) {
			t.Fatalf("peek: %v", err)
		}
	}
	if live != 1 {
		t.Fatalf("%d of alice's links work, want 1 (the last)", live)
	}
	if p, err := s.Peek(ctx, bobID); err != nil || p.Principal != "bob" {
		t.Fatalf("bob's: %+v %v", p, err)
	}
	n := 0
	_ = filepath.Walk(filepath.Join(dir, "consents"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			n++
		}
		return nil
	})
	if n != 2 {
		t.Fatalf("%d flow objects in the store, want 2", n)
	}
}

// TestStoreOnS3: the same store over the s3:// backend (a fake S3 in the
// test process, real HTTP): put, get, list, delete, and a consent flow
// taken once under a burst of concurrent takes from two handles.
func TestStoreOnS3(t *testing.T) {
	ctx := context.Background()
	b := blobtest.NewS3(t, "creds")
	k := keys(t, "k1:"+credstore.NewKey())
	s1, err := credstore.Open(ctx, b.URL, k)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := credstore.Open(ctx, b.URL, k)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	sec := credstore.Secret{AccessToken: "a-0123456789", RefreshToken: "r-0123456789"}
	if err := s1.Put(ctx, credstore.Record{Principal: "alice", Upstream: "code", Obtained: time.Now()}, sec); err != nil {
		t.Fatal(err)
	}
	if _, got, err := s2.Get(ctx, "alice", "code"); err != nil || got != sec {
		t.Fatalf("get: %v", err)
	}
	if recs, bad, err := s2.List(ctx); err != nil || len(bad) > 0 || len(recs) != 1 {
		t.Fatalf("list: %v %v %v", recs, bad, err)
	}
	id, err := s1.Begin(ctx, credstore.Pending{Principal: "alice", Upstream: "code", Expiry: time.Now().Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := s1
			if i%2 == 1 {
				s = s2
			}
			_, err := s.Take(ctx, id)
			if err != nil && !credstore.IsGone(err) {
				t.Errorf("take: %v", err)
			}
			if err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d takes won, want 1", wins)
	}
	if ok, err := s2.Delete(ctx, "alice", "code"); !ok || err != nil {
		t.Fatalf("delete: %v %v", ok, err)
	}
	if ok, _ := s1.Has(ctx, "alice", "code"); ok {
		t.Fatal("still there")
	}
}
