package ocr_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testdocs"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
)

// TestFailingEngineBacksOffThenDeadLetters: a job whose engine fails is retried after
// about 3 s and then 9 s (±10% jitter, on the injected clock), dead-lettered after its
// third attempt with its error history and correlation id, and its document is failed
// with max_retries_exceeded; requeued from the dead-letter store it then succeeds.
func TestFailingEngineBacksOffThenDeadLetters(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	q := e.queue(t, cfg)
	failing := &countingEngine{err: errors.New("engine exploded")}
	w := e.worker(t, failing, cfg)
	r := e.reaper(t, cfg)
	u := e.upload(t, "image/png", testdocs.PNG("HELLO"))
	if err := q.Handoff(ctxT(t), u, false); err != nil {
		t.Fatal(err)
	}

	// Attempt n+1 is due BackoffBase·3^(n-1) after failure n: 3 s, then 9 s.
	for n, wait := range []time.Duration{3 * time.Second, 9 * time.Second} {
		e.runOne(t, w)
		if st := e.stats(t); st.Delayed != 1 || st.Pending != 0 || st.InFlight != 0 {
			t.Fatalf("after failure %d: %+v, want one delayed job", n+1, st)
		}
		if d := e.doc(t, u.ID); d.Attempts != n+1 || !strings.Contains(d.Error, "engine exploded") || d.MaxRetriesExceeded {
			t.Fatalf("document after failure %d: attempts %d error %q max %v", n+1, d.Attempts, d.Error, d.MaxRetriesExceeded)
		}
		e.clk.Add(wait*9/10 - time.Millisecond) // just before the earliest jittered due time
		if err := r.Tick(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if st := e.stats(t); st.Pending != 0 {
			t.Fatalf("retry %d promoted %v early", n+1, wait*9/10)
		}
		e.clk.Add(wait*2/10 + 2*time.Millisecond) // just after the latest
		if err := r.Tick(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if st := e.stats(t); st.Pending != 1 || st.Delayed != 0 {
			t.Fatalf("retry %d not promoted by %v: %+v", n+1, wait*11/10, st)
		}
	}
	e.runOne(t, w)
	if failing.Calls() != 3 {
		t.Fatalf("engine ran %d times, want 3", failing.Calls())
	}
	st := e.stats(t)
	if st.Dead != 1 || st.Pending+st.Delayed+st.InFlight != 0 {
		t.Fatalf("after the last attempt: %+v, want one dead job", st)
	}
	dead, total, err := q.Dead(ctxT(t), 0, 10)
	if err != nil || total != 1 || len(dead) != 1 {
		t.Fatalf("dead list: %d of %d, %v", len(dead), total, err)
	}
	j := dead[0]
	if j.DocumentID != u.ID || j.CorrelationID != u.CorrelationID || j.Attempts != 3 || len(j.Errors) != 3 {
		t.Fatalf("dead job %+v, want document %s, correlation %s, 3 attempts with 3 errors", j, u.ID, u.CorrelationID)
	}
	for i, je := range j.Errors {
		if je.Attempt != i+1 || !strings.Contains(je.Error, "engine exploded") {
			t.Fatalf("error %d: %+v", i, je)
		}
	}
	d := e.doc(t, u.ID)
	if d.Status != documents.Failed || !d.MaxRetriesExceeded || !strings.Contains(d.Error, "engine exploded") || d.ErrorTime.IsZero() {
		t.Fatalf("document %+v, want failed with max_retries_exceeded", d)
	}

	// Requeued, it runs again (with fresh attempts) and succeeds once the engine works.
	if err := q.Requeue(ctxT(t), j.ID); err != nil {
		t.Fatal(err)
	}
	if err := q.Requeue(ctxT(t), j.ID); !errors.Is(err, ocrqueue.ErrJobNotFound) {
		t.Fatalf("second requeue: %v, want ErrJobNotFound", err)
	}
	if st := e.stats(t); st.Dead != 0 || st.Pending != 1 {
		t.Fatalf("after requeue: %+v", st)
	}
	e.runOne(t, e.worker(t, &countingEngine{}, cfg))
	if d := e.doc(t, u.ID); d.Status != documents.AutoApproved || d.Error != "" || d.Eval == nil || d.OCR == nil {
		t.Fatalf("document after requeue: %+v, want auto_approved", d)
	}
	if st := e.stats(t); st != (ocrqueue.Stats{}) {
		t.Fatalf("queue not empty: %+v", st)
	}
}

// TestSameDocumentOnceUnlessForced: three concurrent enqueues of one document make one
// job, processed once; an unforced reprocess is a no-op; a forced one runs it again.
func TestSameDocumentOnceUnlessForced(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	q := e.queue(t, cfg)
	eng := &countingEngine{}
	w := e.worker(t, eng, cfg)
	u := e.upload(t, "image/png", testdocs.PNG("HELLO"))

	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	jobs := map[string]bool{}
	for range 3 {
		wg.Go(func() {
			id, isNew, err := q.Enqueue(ctxT(t), u, false)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			jobs[id] = true
			if isNew {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 || len(jobs) != 1 {
		t.Fatalf("3 concurrent enqueues created %d jobs (%d ids), want 1", created, len(jobs))
	}
	if st := e.stats(t); st.Pending != 1 {
		t.Fatalf("pending %d, want 1", st.Pending)
	}
	e.runOne(t, w)
	if _, isNew, err := q.Reprocess(ctxT(t), u.ID, false); err != nil || isNew {
		t.Fatalf("unforced reprocess: new=%v %v, want a no-op", isNew, err)
	}
	if st := e.stats(t); st.Pending != 0 || eng.Calls() != 1 {
		t.Fatalf("after unforced reprocess: %+v, %d engine calls", st, eng.Calls())
	}
	if _, isNew, err := q.Reprocess(ctxT(t), u.ID, true); err != nil || !isNew {
		t.Fatalf("forced reprocess: new=%v %v", isNew, err)
	}
	e.runOne(t, w)
	if eng.Calls() != 2 {
		t.Fatalf("engine ran %d times, want 2 (once, then forced)", eng.Calls())
	}
	if d := e.doc(t, u.ID); d.Status != documents.AutoApproved {
		t.Fatalf("document %s after forced reprocess", d.Status)
	}
}

// TestMismatchedFileFailsAtOnce: bytes that are not what the content type claims fail
// permanently on the first attempt, without running the engine.
func TestMismatchedFileFailsAtOnce(t *testing.T) {
	tests := []struct {
		name, contentType string
		data              []byte
		want              string
	}{
		{"pdf declared png", "image/png", testdocs.PDF("HELLO"), "declared image/png, but its bytes are application/pdf"},
		{"text declared jpeg", "image/jpeg", []byte("hello, world"), "not a JPEG, PNG, TIFF or PDF"},
		{"empty declared pdf", "application/pdf", nil, "file is empty"},
	}
	e := newEnv(t)
	cfg := e.config()
	q := e.queue(t, cfg)
	eng := &countingEngine{}
	w := e.worker(t, eng, cfg)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u := e.upload(t, tc.contentType, tc.data)
			if err := q.Handoff(ctxT(t), u, false); err != nil {
				t.Fatal(err)
			}
			e.runOne(t, w)
			d := e.doc(t, u.ID)
			if d.Status != documents.Failed || d.MaxRetriesExceeded || !strings.Contains(d.Error, tc.want) {
				t.Fatalf("document %s max_retries=%v error %q, want failed at once with %q", d.Status, d.MaxRetriesExceeded, d.Error, tc.want)
			}
			if st := e.stats(t); st.Delayed != 0 || st.Pending != 0 {
				t.Fatalf("a permanent failure was retried: %+v", st)
			}
			job, err := e.stores.Jobs.Job(ctxT(t), d.JobID)
			if err != nil || job.Died.IsZero() || job.Attempts != 1 || len(job.Errors) != 1 {
				t.Fatalf("job %+v %v, want dead after one attempt", job, err)
			}
		})
	}
	if eng.Calls() != 0 {
		t.Fatalf("engine ran %d times on invalid files", eng.Calls())
	}
}

// TestReaperReclaimsExpiredLease: a job whose worker stops renewing is reclaimed once
// its lease expires, without counting a failed attempt (a reclaim instead), gets a
// larger fencing token, and the stale holder can no longer settle it or change its
// document.
func TestReaperReclaimsExpiredLease(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	q := e.queue(t, cfg)
	r := e.reaper(t, cfg)
	u := e.upload(t, "image/png", testdocs.PNG("HELLO"))
	if err := q.Handoff(ctxT(t), u, false); err != nil {
		t.Fatal(err)
	}
	stale, err := e.stores.Jobs.Fetch(ctxT(t), time.Second, cfg.Lease)
	if err != nil || stale == nil {
		t.Fatalf("fetch: %v %v", stale, err)
	}
	e.clk.Add(cfg.Lease - time.Second)
	if err := r.Tick(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if st := e.stats(t); st.InFlight != 1 {
		t.Fatalf("reclaimed before the lease expired: %+v", st)
	}
	e.clk.Add(2 * time.Second)
	if err := r.Tick(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if st := e.stats(t); st.InFlight != 0 || st.Pending != 1 {
		t.Fatalf("after the lease expired: %+v, want the job pending again", st)
	}
	if ok, err := e.stores.Jobs.Renew(ctxT(t), stale.ID, stale.Token, cfg.Lease); err != nil || ok {
		t.Fatalf("stale renew: %v %v, want refused", ok, err)
	}
	eng := &countingEngine{}
	j := e.runOne(t, e.worker(t, eng, cfg))
	if j.Token <= stale.Token || j.Attempts != 0 || j.Reclaims != 1 {
		t.Fatalf("reclaimed job token %d attempts %d reclaims %d, want token > %d, no attempt and 1 reclaim counted",
			j.Token, j.Attempts, j.Reclaims, stale.Token)
	}
	if ok, err := e.stores.Jobs.Ack(ctxT(t), stale.ID, stale.Token); err != nil || ok {
		t.Fatalf("stale ack: %v %v, want refused", ok, err)
	}
	_, err = e.stores.Docs.Transition(ctxT(t), u.ID, time.Hour, documents.Change{
		From: []documents.Status{documents.AutoApproved}, To: documents.Failed,
		Fence: documents.Fence{Hold: true, Token: stale.Token}})
	var fe *documents.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("stale document change: %v, want a FencedError", err)
	}
	if d := e.doc(t, u.ID); d.Status != documents.AutoApproved || eng.Calls() != 1 {
		t.Fatalf("document %s, engine calls %d", d.Status, eng.Calls())
	}
}

// TestRecoverDocumentsLeftProcessing: at start the reaper fails a document whose job
// was dead-lettered while it was processing, and re-enqueues one whose job is gone.
func TestRecoverDocumentsLeftProcessing(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxAttempts = 1
	q := e.queue(t, cfg)
	r := e.reaper(t, cfg)
	// A worker takes the document and dies; its job is dead-lettered by a reclaim whose
	// process died before failing the document (simulated by the raw store call).
	u, _ := e.takeDocument(t, q, cfg, "HELLO")
	e.clk.Add(cfg.Lease + time.Second)
	if got, err := e.stores.Jobs.Reclaim(ctxT(t), cfg.Lease, 1, 10); err != nil || len(got) != 1 || !got[0].Dead {
		t.Fatalf("reclaim: %+v %v", got, err)
	}
	if err := r.Recover(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if d := e.doc(t, u.ID); d.Status != documents.Failed || !d.MaxRetriesExceeded {
		t.Fatalf("document %s max_retries=%v after recovery, want failed", d.Status, d.MaxRetriesExceeded)
	}
	if ids, _ := e.stores.Jobs.ProcessingDocuments(ctxT(t), 0, 10); len(ids) != 0 {
		t.Fatalf("still indexed as processing: %v", ids)
	}
}

// TestStatsOldestAge: statistics report depth and the oldest pending job's age.
func TestStatsOldestAge(t *testing.T) {
	e := newEnv(t)
	q := e.queue(t, e.config())
	for range 3 {
		if err := q.Handoff(ctxT(t), e.upload(t, "application/pdf", testdocs.PDF("X")), false); err != nil {
			t.Fatal(err)
		}
		e.clk.Add(time.Second)
	}
	st, err := q.Stats(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 3 || st.OldestAge != 3*time.Second {
		t.Fatalf("stats %+v, want 3 pending, oldest 3s", st)
	}
}

var _ ocr.Engine = (*countingEngine)(nil)

// TestJobThatKillsEveryWorkerEnds: a job whose workers keep dying holding it is taken
// back without any failed attempt counted, until MaxReclaims, when it is dead-lettered
// and its document fails saying why.
func TestJobThatKillsEveryWorkerEnds(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.MaxReclaims = 2
	q, r := e.queue(t, cfg), e.reaper(t, cfg)
	u := e.upload(t, "image/png", testdocs.PNG("POISON"))
	if err := q.Handoff(ctxT(t), u, false); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		j, err := e.stores.Jobs.Fetch(ctxT(t), time.Second, cfg.Lease)
		if err != nil || j == nil {
			t.Fatalf("fetch %d: %v %v", i, j, err)
		}
		if j.Attempts != 0 || j.Reclaims != i-1 {
			t.Fatalf("fetch %d: attempts %d reclaims %d, want 0 and %d", i, j.Attempts, j.Reclaims, i-1)
		}
		e.clk.Add(cfg.Lease + time.Second) // the worker died: its lease runs out
		if err := r.Tick(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.stats(t); st.Dead != 1 || st.Pending != 0 || st.InFlight != 0 {
		t.Fatalf("queue %+v, want the job dead-lettered", st)
	}
	dead, _, err := e.stores.Jobs.Dead(ctxT(t), 0, 10)
	if err != nil || len(dead) != 1 || dead[0].Attempts != 0 || dead[0].Reclaims != 2 || !strings.Contains(dead[0].DeadReason, "kills or stalls every worker") {
		t.Fatalf("dead job %+v %v", dead, err)
	}
	if d := e.doc(t, u.ID); d.Status != documents.Failed || !d.MaxRetriesExceeded || d.Reclaims != 2 || d.Attempts != 0 ||
		!strings.Contains(d.Error, "taken back 2 times") {
		t.Fatalf("document %+v, want failed after 2 reclaims with no attempt", d)
	}
}

// takeDocument hands a PNG of words to q and does what a worker does first: fetches
// its job, indexes the document as processing and takes it (one attempt recorded).
func (e *env) takeDocument(t *testing.T, q *ocr.Queue, cfg ocr.Config, words string) (*staging.Upload, *ocrqueue.Job) {
	t.Helper()
	u := e.upload(t, "image/png", testdocs.PNG(words))
	if err := q.Handoff(ctxT(t), u, false); err != nil {
		t.Fatal(err)
	}
	j, err := e.stores.Jobs.Fetch(ctxT(t), time.Second, cfg.Lease)
	if err != nil || j == nil {
		t.Fatal(j, err)
	}
	if err := e.stores.Jobs.MarkProcessing(ctxT(t), u.ID); err != nil {
		t.Fatal(err)
	}
	one := 1
	if _, err := e.stores.Docs.Transition(ctxT(t), u.ID, time.Hour, documents.Change{From: []documents.Status{documents.Uploaded},
		To: documents.Processing, Fence: documents.Fence{Start: true, Token: j.Token}, Attempts: &one}); err != nil {
		t.Fatal(err)
	}
	return u, j
}

// TestStartupRecovery follows the design's start-up steps: with Redis up, stale
// processing entries are cleared; a document stuck in processing (its worker died) is
// taken out of every queue, reset (attempts 0, status uploaded, with its event) and
// requeued fresh, its job not counted as failed; a document whose job another process
// holds (lease running) or that waits for a retry is left alone.
func TestStartupRecovery(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	q, r := e.queue(t, cfg), e.reaper(t, cfg)
	handoff := func(words string) (*staging.Upload, *ocrqueue.Job) { return e.takeDocument(t, q, cfg, words) }
	stuck, stuckJob := handoff("STUCK")
	if _, err := e.stores.Jobs.Fail(ctxT(t), stuckJob.ID, stuckJob.Token, "engine exploded", ocrqueue.FailRetry, e.clk.Now(), 5); err != nil {
		t.Fatal(err) // one failed attempt before the crash, which recovery resets
	}
	if _, err := e.stores.Jobs.Promote(ctxT(t), 10); err != nil {
		t.Fatal(err)
	}
	if j, err := e.stores.Jobs.Fetch(ctxT(t), time.Second, cfg.Lease); err != nil || j == nil || j.ID != stuckJob.ID || j.Attempts != 1 {
		t.Fatalf("refetch: %+v %v", j, err)
	}
	e.clk.Add(cfg.Lease + time.Second) // its worker died: the lease ran out
	live, _ := handoff("LIVE")         // another process holds this one, lease running
	gone := e.upload(t, "image/png", testdocs.PNG("GONE"))
	if err := e.stores.Jobs.MarkProcessing(ctxT(t), gone.ID); err != nil { // a stale entry: no document
		t.Fatal(err)
	}
	before := len(e.docEvents(t, stuck.ID))

	if err := r.Recover(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	d := e.doc(t, stuck.ID)
	if d.Status != documents.Uploaded || d.Attempts != 0 || d.Reclaims != 1 || d.Error != "" {
		t.Fatalf("stuck document after recovery: %+v, want uploaded, attempts 0, 1 reclaim, no error", d)
	}
	evs := e.docEvents(t, stuck.ID)
	if len(evs) != before+1 || !strings.Contains(string(evs[len(evs)-1].Payload), `"status":"DOCUMENT_STATUS_UPLOADED"`) {
		t.Fatalf("recovery emitted %d events, the last %s; want one back to uploaded", len(evs)-before, evs[len(evs)-1].Payload)
	}
	if d := e.doc(t, live.ID); d.Status != documents.Processing {
		t.Fatalf("document another process holds: %s, want left processing", d.Status)
	}
	if st := e.stats(t); st.Pending != 1 || st.InFlight != 1 || st.Delayed != 0 {
		t.Fatalf("queue after recovery %+v, want the stuck job pending and the live one in flight", st)
	}
	ids, err := e.stores.Jobs.ProcessingDocuments(ctxT(t), 0, 10)
	if err != nil || slices.Contains(ids, gone.ID) {
		t.Fatalf("processing index %v %v: the stale entry is still there", ids, err)
	}
	// The requeued job runs fresh: no failed attempt, and the document gets decided.
	eng := &countingEngine{}
	j := e.runOne(t, e.worker(t, eng, cfg))
	if j.ID != stuckJob.ID || j.Attempts != 0 || j.Reclaims != 1 {
		t.Fatalf("requeued job %+v, want %s with attempts 0 and 1 reclaim", j, stuckJob.ID)
	}
	if d := e.doc(t, stuck.ID); d.Status != documents.AutoApproved {
		t.Fatalf("document after the fresh run: %s", d.Status)
	}
	// A second recovery (another process starting) changes nothing.
	if err := r.Recover(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if d := e.doc(t, live.ID); d.Status != documents.Processing {
		t.Fatalf("document another process holds: %s after a second recovery", d.Status)
	}
}

// TestPurge: purging the pending set removes its jobs and fails their documents (so
// nothing waits for them), leaves jobs in flight alone, and a purged document can be
// reprocessed; purging the dead set forgets its jobs.
func TestPurge(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	q := e.queue(t, cfg)
	var ups []*staging.Upload
	for i := range 3 {
		u := e.upload(t, "image/png", testdocs.PNG("PURGE", strings.Repeat("I", i+1)))
		if err := q.Handoff(ctxT(t), u, false); err != nil {
			t.Fatal(err)
		}
		ups = append(ups, u)
	}
	inFlight, err := e.stores.Jobs.Fetch(ctxT(t), time.Second, cfg.Lease) // the oldest: ups[0]
	if err != nil || inFlight == nil {
		t.Fatal(inFlight, err)
	}
	n, err := q.Purge(ctxT(t), ocrqueue.PurgePending)
	if err != nil || n != 2 {
		t.Fatalf("purge pending: %d %v, want 2", n, err)
	}
	if st := e.stats(t); st.Pending != 0 || st.InFlight != 1 {
		t.Fatalf("queue after the purge %+v, want nothing pending and the job in flight kept", st)
	}
	for _, u := range ups[1:] {
		if d := e.doc(t, u.ID); d.Status != documents.Failed || !strings.Contains(d.Error, "purged") {
			t.Fatalf("purged document %s: %s %q, want failed saying it was purged", u.ID, d.Status, d.Error)
		}
	}
	if d := e.doc(t, ups[0].ID); d.Status != documents.Uploaded {
		t.Fatalf("document in flight: %s, want untouched", d.Status)
	}
	// Its dedupe key is gone: reprocessing without force enqueues it again.
	if _, isNew, err := q.Reprocess(ctxT(t), ups[1].ID, false); err != nil || !isNew {
		t.Fatalf("reprocess a purged document: new=%v %v", isNew, err)
	}
	if _, err := e.stores.Jobs.Fail(ctxT(t), inFlight.ID, inFlight.Token, "bad", ocrqueue.FailDead, e.clk.Now(), 3); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Purge(ctxT(t), ocrqueue.PurgeDead); err != nil || n != 1 {
		t.Fatalf("purge dead: %d %v", n, err)
	}
	if st := e.stats(t); st.Dead != 0 || st.Pending != 1 {
		t.Fatalf("queue after purging the dead %+v", st)
	}
	if _, err := q.Purge(ctxT(t), ocrqueue.PurgeSet("active")); err == nil {
		t.Fatal("purging jobs in flight was accepted")
	}
}
