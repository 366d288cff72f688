// Package blob keeps large values out of workflow histories: a
// content-addressed store of byte strings, referenced from history by
// "sha256:<hex>". The worker keeps the pre-images it captures and the
// compensations it computes here when they are large, so a task that edits
// big files neither bloats its history nor exceeds what one continue-as-new
// can carry.
//
// Every worker that may run a task's activities must reach the same store.
// Where it lives is a URL (Open): file:///dir (one host, or a shared
// mount), s3://bucket (AWS S3 or anything that speaks its protocol: MinIO,
// Ceph, R2, GCS's interoperability endpoint) or mem:// (one process, for
// tests). The backends are gocloud.dev/blob drivers; only those three are
// linked in (see RATIONALE.md). A value is verified against its hash when
// read, whatever the backend: a store is trusted to keep bytes, not to keep
// them right.
//
// This package is a leaf: the standard library and gocloud.dev only, no
// logging.
package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	gcblob "gocloud.dev/blob"
	"gocloud.dev/blob/fileblob"
	"gocloud.dev/blob/memblob"
	"gocloud.dev/blob/s3blob"
	"gocloud.dev/gcerrors"
)

// Prefix starts every reference.
const Prefix = "sha256:"

// Schemes are the URL schemes Open accepts.
var Schemes = []string{"file", "s3", "mem"}

// ErrNotFound is returned (wrapped) by Get when the store has no blob for
// the reference; ErrCorrupt when the blob it has no longer matches its
// hash.
var (
	ErrNotFound = errors.New("blob not found")
	ErrCorrupt  = errors.New("blob corrupt")
)

// Store is a bucket of blobs named by their SHA-256. It is safe for
// concurrent use by goroutines and processes: every write of a name writes
// the same content, and each backend makes a write visible whole or not at
// all (fileblob renames a finished temporary file; S3 PUTs are atomic).
type Store struct {
	bucket *gcblob.Bucket
	where  string // the URL, for messages
}

// New opens (creating it if needed) a store in the local directory dir:
// the same as Open with a file:// URL.
func New(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	return openFile(abs, FileURL(abs))
}

// FileURL is the file:// URL of a local directory.
func FileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}

// CheckURL reports what is wrong with a store URL, in words that say how
// to write it; nil if Open would accept it.
func CheckURL(raw string) error {
	_, err := parseURL(raw)
	return err
}

func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL (%v); write file:///var/lib/airlock/blobs or s3://BUCKET?region=REGION", raw, err)
	}
	if !slices.Contains(Schemes, u.Scheme) {
		return nil, fmt.Errorf("%q: scheme %q is not one of %s; write file:///var/lib/airlock/blobs or s3://BUCKET?region=REGION", raw, u.Scheme, strings.Join(Schemes, ", "))
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("%q names host %q: a file URL names a local directory with three slashes, file:///var/lib/airlock/blobs", raw, u.Host)
		}
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("%q has no absolute directory: write file:///var/lib/airlock/blobs", raw)
		}
		if u.RawQuery != "" {
			return nil, fmt.Errorf("%q: a file URL takes no query parameters", raw)
		}
	case "s3":
		if u.Host == "" {
			return nil, fmt.Errorf("%q names no bucket: write s3://BUCKET?region=REGION (add &endpoint=URL&use_path_style=true for MinIO and other S3-compatible servers)", raw)
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("%q has a path: put the key prefix in ?prefix=airlock/ instead, e.g. s3://%s?prefix=airlock/", raw, u.Host)
		}
	}
	return u, nil
}

// Open opens the store a URL names: file:///dir (created if needed),
// s3://bucket?region=R[&endpoint=URL&use_path_style=true][&prefix=P/]
// (credentials come from the AWS SDK's usual chain: environment, shared
// files, instance role) or mem://.
func Open(ctx context.Context, raw string) (*Store, error) {
	u, err := parseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	switch u.Scheme {
	case "file":
		return openFile(filepath.FromSlash(u.Path), raw)
	case "mem":
		return &Store{bucket: memblob.OpenBucket(nil), where: raw}, nil
	}
	// s3: the URL opener reads region, endpoint and path style; the key
	// prefix is ours to apply.
	q := u.Query()
	prefix := q.Get("prefix")
	q.Del("prefix")
	u.RawQuery = q.Encode()
	b, err := (&s3blob.URLOpener{}).OpenBucketURL(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", raw, err)
	}
	if prefix != "" {
		b = gcblob.PrefixedBucket(b, prefix)
	}
	return &Store{bucket: b, where: raw}, nil
}

func openFile(dir, where string) (*Store, error) {
	b, err := fileblob.OpenBucket(dir, &fileblob.Options{
		CreateDir:   true,
		DirFileMode: 0o700,
		// The temporary file is written beside its final name, so the
		// rename is atomic even when dir is a mount of its own.
		NoTempDir: true,
		// The hash is the only attribute that matters and it is the name:
		// no .attrs sidecar files (and blobs written before stay readable).
		Metadata: fileblob.MetadataDontWrite,
	})
	if err != nil {
		return nil, fmt.Errorf("blob store %s: %w", dir, err)
	}
	return &Store{bucket: b, where: where}, nil
}

// String is where the store is, for messages.
func (s *Store) String() string { return s.where }

// Close releases the backend's resources.
func (s *Store) Close() error { return s.bucket.Close() }

// Put stores data and returns its reference. Storing the same data twice
// is harmless (and the second time writes nothing).
func (s *Store) Put(ctx context.Context, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	name := hex.EncodeToString(sum[:])
	key := Key(name)
	if ok, err := s.bucket.Exists(ctx, key); err == nil && ok {
		return Prefix + name, nil
	}
	if err := s.bucket.WriteAll(ctx, key, data, &gcblob.WriterOptions{ContentType: "application/octet-stream"}); err != nil {
		return "", fmt.Errorf("blob store %s: writing %s: %w", s.where, name, err)
	}
	return Prefix + name, nil
}

// Get reads the blob a reference names and checks its hash. A missing
// blob wraps ErrNotFound; one whose content no longer matches, ErrCorrupt.
func (s *Store) Get(ctx context.Context, ref string) ([]byte, error) {
	name, err := parseRef(ref)
	if err != nil {
		return nil, err
	}
	b, err := s.bucket.ReadAll(ctx, Key(name))
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%w: %s is not in %s: every worker must use the same blob store (blobs: in the configuration)", ErrNotFound, ref, s.where)
	}
	if err != nil {
		return nil, fmt.Errorf("blob store %s: reading %s: %w", s.where, ref, err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != name {
		return nil, fmt.Errorf("%w: %s in %s no longer matches its hash", ErrCorrupt, ref, s.where)
	}
	return b, nil
}

func parseRef(ref string) (string, error) {
	name, ok := strings.CutPrefix(ref, Prefix)
	if !ok || len(name) != sha256.Size*2 {
		return "", fmt.Errorf("blob reference %q is not %s<64 hex digits>", ref, Prefix)
	}
	if _, err := hex.DecodeString(name); err != nil || strings.ToLower(name) != name {
		return "", fmt.Errorf("blob reference %q is not %s<64 hex digits>", ref, Prefix)
	}
	return name, nil
}

// Key is the object key of a blob's hex name: spread over 256 prefixes
// ("ab/abcd…"), which on a file store are the subdirectories that stores
// written before the backends existed already use.
func Key(name string) string { return name[:2] + "/" + name }
