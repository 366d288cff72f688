package blob

import (
	"context"

	gcblob "gocloud.dev/blob"
)

// OpenBucket opens the bucket a store URL names (as Open does), under
// prefix: for named, mutable objects kept beside the blobs in the store
// every gateway and worker already shares (internal/credstore). Closing
// it closes the store.
func OpenBucket(ctx context.Context, raw, prefix string) (*gcblob.Bucket, error) {
	s, err := Open(ctx, raw)
	if err != nil {
		return nil, err
	}
	return gcblob.PrefixedBucket(s.bucket, prefix), nil
}
