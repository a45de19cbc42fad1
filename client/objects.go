package client

import (
	"context"
	"fmt"
	"iter"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// Objects yields the caller's stored objects whose keys begin with prefix (all of them
// for ""), in key order, reading ListObjects a page at a time as the loop goes; it stops
// at the first error, which it yields.
func (c *Client) Objects(ctx context.Context, prefix string) iter.Seq2[*chunkupv1.Object, error] {
	return func(yield func(*chunkupv1.Object, error) bool) {
		token := ""
		for {
			r, err := c.api.ListObjects(ctx, &chunkupv1.ListObjectsRequest{Prefix: prefix, PageToken: token})
			if err != nil {
				yield(nil, fmt.Errorf("chunkup: list objects: %w", err))
				return
			}
			for _, o := range r.Objects {
				if !yield(o, nil) {
					return
				}
			}
			if token = r.NextPageToken; token == "" {
				return
			}
		}
	}
}

// Stat describes the caller's object at key.
func (c *Client) Stat(ctx context.Context, key string) (*chunkupv1.Object, error) {
	r, err := c.api.StatObject(ctx, &chunkupv1.StatObjectRequest{Key: key})
	if err != nil {
		return nil, fmt.Errorf("chunkup: stat object: %w", err)
	}
	return r.Object, nil
}

// Delete deletes the caller's object at key; with ifMatch, only while it has that ETag.
func (c *Client) Delete(ctx context.Context, key, ifMatch string) error {
	if _, err := c.api.DeleteObject(ctx, &chunkupv1.DeleteObjectRequest{Key: key, IfMatch: ifMatch}); err != nil {
		return fmt.Errorf("chunkup: delete object: %w", err)
	}
	return nil
}
