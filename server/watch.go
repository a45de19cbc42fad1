package server

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/staging"
)

// Watch pacing: notices are coalesced into at most one update per watchTick, and the
// state is re-read every watchRefresh ticks even without a notice, so a watcher whose
// notice was lost still converges.
const (
	watchTick    = 250 * time.Millisecond
	watchRefresh = 8
)

// WatchUpload implements UploadService.WatchUpload.
func (s *UploadService) WatchUpload(req *chunkupv1.WatchUploadRequest, stream chunkupv1.UploadService_WatchUploadServer) error {
	id := req.UploadId
	if err := validID(id); err != nil {
		return toStatus(id, err)
	}
	ctx := stream.Context()
	// Subscribe before the snapshot, so no change between the two goes unnoticed.
	ps := s.store.SubscribeProgress(ctx, id)
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		return toStatus(id, err)
	}
	notices := ps.Channel()

	var last *chunkupv1.UploadProgress
	update := func() (bool, error) {
		u, err := s.get(ctx, id)
		if err != nil {
			return false, toStatus(id, err)
		}
		p := progress(u)
		if last == nil || !proto.Equal(p, last) {
			if err := stream.Send(&chunkupv1.WatchUploadResponse{Progress: p}); err != nil {
				return false, err
			}
			last = p
		}
		return u.Status.Terminal(), nil
	}
	if done, err := update(); done || err != nil {
		return err
	}
	t := time.NewTicker(watchTick)
	defer t.Stop()
	dirty, ticks := false, 0
	for {
		select {
		case <-s.draining:
			return status.Error(codes.Unavailable, "this server is shutting down; watch again (another server will answer)")
		case <-ctx.Done():
			return status.FromContextError(context.Cause(ctx)).Err()
		case _, ok := <-notices:
			if !ok {
				return status.Error(codes.Unavailable, "progress subscription closed; watch again")
			}
			dirty = true
		case <-t.C:
			ticks++
			if dirty || ticks%watchRefresh == 0 {
				dirty = false
				if done, err := update(); done || err != nil {
					return err
				}
			}
		}
	}
}

func progress(u *staging.Upload) *chunkupv1.UploadProgress {
	p := &chunkupv1.UploadProgress{
		UploadId: u.ID, State: states[u.Status], ReceivedChunks: uint32(len(u.ReceivedChunks)),
		UploadedChunks: u.Uploaded, TotalChunks: u.Total, ReceivedBytes: u.ReceivedBytes,
		UploadedBytes: u.UploadedBytes, ExpectedSize: u.ExpectedSize, Size: u.Size, Etag: u.ETag,
		Error: u.Error, UpdateTime: ts(u.Updated),
	}
	switch {
	case u.Status == staging.StatusCompleted:
		p.Percent = 100
	case u.ExpectedSize > 0:
		p.Percent = 100 * float64(u.UploadedBytes) / float64(u.ExpectedSize)
	}
	return p
}
