package config

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// BlobSchemes are the blob store URL schemes (package blob opens them; the
// configuration only checks their shape, without dialing).
var BlobSchemes = []string{"file", "s3", "mem"}

// BlobsURL is the blob store's URL: blobs, else blobs_dir as a file://
// URL (relative to the current directory, as data_dir is), else
// file://<dataDir>/blobs.
func (c *Config) BlobsURL(dataDir string) (string, error) {
	if c.Blobs != "" {
		return c.Blobs, nil
	}
	dir := c.BlobsDir
	if dir == "" {
		dir = filepath.Join(dataDir, "blobs")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("blobs_dir %q: %w", dir, err)
	}
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String(), nil
}

func (c *Config) validateBlobs(v *validator) {
	if c.Blobs != "" && c.BlobsDir != "" {
		v.add("blobs", "and blobs_dir are both set; keep one (blobs_dir: DIR is the same as blobs: file:///absolute/DIR)")
	}
	if v.lines.Has("blobs_dir") && strings.TrimSpace(c.BlobsDir) == "" {
		v.add("blobs_dir", "is empty; omit it for <data_dir>/blobs, or write blobs: with a URL")
	}
	if !v.lines.Has("blobs") {
		return
	}
	const how = "write file:///var/lib/airlock/blobs (one host or a shared mount), s3://BUCKET?region=REGION (add &endpoint=URL&use_path_style=true for MinIO and other S3-compatible servers, &prefix=airlock/ to share a bucket) or mem:// (one process, tests)"
	u, err := url.Parse(c.Blobs)
	switch {
	case strings.TrimSpace(c.Blobs) == "":
		v.add("blobs", "is empty; omit it for <data_dir>/blobs, or %s", how)
	case err != nil:
		v.add("blobs", "%q is not a URL; %s", c.Blobs, how)
	case !contains(BlobSchemes, u.Scheme):
		v.add("blobs", "%q: scheme %q is not one of %s; %s", c.Blobs, u.Scheme, strings.Join(BlobSchemes, ", "), how)
	case u.Scheme == "file" && ((u.Host != "" && u.Host != "localhost") || !strings.HasPrefix(u.Path, "/")):
		v.add("blobs", "%q does not name an absolute directory: a file URL has three slashes, e.g. file:///var/lib/airlock/blobs", c.Blobs)
	case u.Scheme == "file" && u.RawQuery != "":
		v.add("blobs", "%q: a file URL takes no query parameters", c.Blobs)
	case u.Scheme == "s3" && u.Host == "":
		v.add("blobs", "%q names no bucket; %s", c.Blobs, how)
	case u.Scheme == "s3" && u.Path != "" && u.Path != "/":
		v.add("blobs", "%q has a path: put the key prefix in the query instead, e.g. s3://%s?prefix=airlock/", c.Blobs, u.Host)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
