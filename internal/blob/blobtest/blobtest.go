// Package blobtest serves an S3 bucket in the test process for tests of
// the blob store's s3:// backend: github.com/johannesboyne/gofakes3 speaks
// the S3 protocol over real HTTP, so the AWS SDK that gocloud's s3blob
// uses signs, sends and parses real requests. Only tests import it.
package blobtest

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3 is a bucket served over HTTP until the test ends.
type S3 struct {
	// URL is the blob store URL of the bucket (s3://BUCKET?endpoint=…).
	URL string
	// Backend holds the objects, for a test to look at or damage them
	// behind the store's back.
	Backend *s3mem.Backend
	Bucket  string
}

// NewS3 serves bucket over HTTP on loopback and sets the AWS credentials
// and configuration the SDK reads from the environment (t.Setenv: the
// test may not be parallel).
func NewS3(t testing.TB, bucket string) *S3 {
	t.Helper()
	be := s3mem.New()
	if err := be.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(be).Server())
	t.Cleanup(srv.Close)
	for k, v := range map[string]string{
		"AWS_ACCESS_KEY_ID":     "airlock-test",
		"AWS_SECRET_ACCESS_KEY": "airlock-test-secret",
		"AWS_REGION":            "us-east-1",
		// Nothing from the machine's own AWS configuration.
		"AWS_CONFIG_FILE":             "/dev/null",
		"AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
		"AWS_EC2_METADATA_DISABLED":   "true",
	} {
		t.Setenv(k, v)
	}
	q := url.Values{"endpoint": {srv.URL}, "use_path_style": {"true"}, "region": {"us-east-1"}}
	return &S3{URL: "s3://" + bucket + "?" + q.Encode(), Backend: be, Bucket: bucket}
}
