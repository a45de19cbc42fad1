package server

import (
	"context"
	"encoding/base64"
	"regexp"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/upload"
)

// Page sizes of ListUploads.
const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// pageCursor is what a page token holds: a member of the tenant's uploads list.
var pageCursor = regexp.MustCompile(`^[0-9]{15}\|[a-z2-7]{26}$`)

// ListUploads implements UploadService.ListUploads: the caller's uploads in progress,
// from the tenant's list of uploads (an index, not a scan of the keyspace).
func (s *UploadService) ListUploads(ctx context.Context, req *chunkupv1.ListUploadsRequest) (*chunkupv1.ListUploadsResponse, error) {
	size := int(req.PageSize)
	switch {
	case size == 0:
		size = defaultPageSize
	case size < 0 || size > maxPageSize:
		return nil, toStatus("", invalidf("page_size must be between 1 and %d (or 0 for %d)", maxPageSize, defaultPageSize))
	}
	cursor := ""
	if req.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(req.PageToken)
		if err != nil || !pageCursor.Match(b) {
			return nil, toStatus("", invalidf("page_token %s is not one this server gave: pass the next_page_token of the previous page, or none to start again", quote(req.PageToken)))
		}
		cursor = string(b)
	}
	ups, next, err := s.lister.InProgress(ctx, upload.TenantFrom(ctx), cursor, size)
	if err != nil {
		return nil, toStatus("", err)
	}
	resp := &chunkupv1.ListUploadsResponse{Uploads: make([]*chunkupv1.Upload, len(ups))}
	for i, u := range ups {
		resp.Uploads[i] = summary(u)
	}
	if next != "" {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	return resp, nil
}

// summary is an upload without its per-chunk detail.
func summary(u *staging.Upload) *chunkupv1.Upload {
	p := toProto(u)
	p.Chunks = nil
	return p
}
