package server

import (
	"context"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/upload"
)

// Watch pacing: a notice is answered at once when no update went out in the last
// watchTick, and otherwise coalesced into one update at the next tick, so a busy upload
// costs at most about one state read per watchTick per watcher while a quiet one (or a
// small upload's whole life) is reported without delay. A notice that the upload ended
// is answered at once: clients wait on it. The state is re-read every watchRefresh
// ticks even without a notice, so a watcher whose notice was lost still converges.
const (
	watchTick    = 250 * time.Millisecond
	watchRefresh = 8
)

// errWatchDraining ends a watch when the server shuts down.
var errWatchDraining = fault.New(fault.Unavailable, "this server is shutting down; watch again (another server will answer)")

// AcquireWatch admits one more watch of tenant's within --max-watches-per-tenant, for
// the document service's watches as for WatchUpload.
func (s *UploadService) AcquireWatch(tenant string) (func(), error) { return s.watches.Acquire(tenant) }

// WatchUpload implements UploadService.WatchUpload.
func (s *UploadService) WatchUpload(req *chunkupv1.WatchUploadRequest, stream chunkupv1.UploadService_WatchUploadServer) error {
	id := req.UploadId
	if err := upload.ValidID(id); err != nil {
		return toStatus(id, err)
	}
	ctx := stream.Context()
	release, err := s.AcquireWatch(upload.TenantFrom(ctx))
	if err != nil {
		return toStatus(id, err)
	}
	defer release()
	// Subscribe before the snapshot, so no change between the two goes unnoticed.
	sub, err := s.progress.Progress(ctx, id)
	if err != nil {
		return toStatus(id, err)
	}
	defer sub.Close()
	notices := sub.C

	var last *chunkupv1.UploadProgress
	var lastRead time.Time
	update := func() (bool, error) {
		lastRead = time.Now()
		u, err := s.core.Get(ctx, id)
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
			return toStatus("", errWatchDraining)
		case <-ctx.Done():
			return status.FromContextError(context.Cause(ctx)).Err()
		case msg, ok := <-notices:
			if !ok {
				return toStatus("", fault.New(fault.Unavailable, "progress subscription closed; watch again"))
			}
			if !staging.Status(msg).Terminal() && time.Since(lastRead) < watchTick {
				dirty = true
				continue
			}
			dirty = false
			if done, err := update(); done || err != nil {
				return err
			}
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
