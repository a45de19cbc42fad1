package e2e

import (
	"testing"

	"google.golang.org/protobuf/proto"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestWatchProgress: a watcher started before the chunks arrive sees progress that
// never goes backwards and ends with COMPLETED; a watcher of a finished upload gets its
// final snapshot and its stream ends.
func TestWatchProgress(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	c := e.client(t, a)
	data := randomBytes(5*chunk+10, 60)
	created, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Upload.UploadId

	reports := make(chan []*chunkupv1.UploadProgress, 1)
	errs := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		var got []*chunkupv1.UploadProgress
		_, err := c.Watch(ctx(t), id, func(p *chunkupv1.UploadProgress) {
			if len(got) == 0 {
				close(first)
			}
			got = append(got, p)
		})
		reports <- got
		errs <- err
	}()
	<-first // the snapshot arrived: the watcher is subscribed
	if err := c.Send(ctx(t), created.Upload, reader(data)); err != nil {
		t.Fatal(err)
	}
	got, err := <-reports, <-errs
	if err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 {
		t.Fatalf("%d reports, want a snapshot and updates", len(got))
	}
	for i := 1; i < len(got); i++ {
		p, q := got[i-1], got[i]
		if q.UploadedBytes < p.UploadedBytes || q.ReceivedBytes < p.ReceivedBytes || q.Percent < p.Percent {
			t.Errorf("progress went backwards: %v then %v", p, q)
		}
	}
	last := got[len(got)-1]
	if last.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED || last.Percent != 100 || last.Size != int64(len(data)) {
		t.Fatalf("last report %v, want COMPLETED at 100%%", last)
	}
	t.Logf("%d reports for %d chunks", len(got), last.TotalChunks)

	var again []*chunkupv1.UploadProgress
	final, err := c.Watch(ctx(t), id, func(p *chunkupv1.UploadProgress) { again = append(again, p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || !proto.Equal(final, last) {
		t.Fatalf("watching a finished upload: %d reports, last %v; want its final snapshot once", len(again), final)
	}
}
