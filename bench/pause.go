package main

import (
	"time"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// pauseResult is what the adaptive contender did while MinIO was paused mid-upload.
type pauseResult struct {
	Bytes int64 `json:"bytes"`
	// PauseSeconds is how long MinIO was stopped (SIGSTOP: its connections hang).
	PauseSeconds float64 `json:"pause_s"`
	// AckedBeforeMiB and AckedDuringMiB are what the client had acknowledged when the
	// pause began, and what was acknowledged during it (from Redis staging).
	AckedBeforeMiB float64 `json:"acked_before_mib"`
	AckedDuringMiB float64 `json:"acked_during_mib"`
	// RedisPeakMiB is Redis' peak used_memory over the whole upload.
	RedisPeakMiB float64 `json:"redis_peak_mib"`
	// Exact: the object was read back and is byte-identical to the input.
	Exact   bool    `json:"exact"`
	Seconds float64 `json:"upload_s"`
}

// pauseS3 uploads Large bytes through the adaptive contender and pauses MinIO for 10 s
// (2 s for a toy run under 256 MiB) once a sixteenth of it is acknowledged:
// acknowledgements should go on from Redis staging, up to the budget, and the object end
// up exact once MinIO is back.
func (b *bench) pauseS3() pauseResult {
	ct, n := b.adaptive, b.cfg.Large
	pause := 10 * time.Second
	if n < 256*MiB {
		pause = 2 * time.Second
	}
	ctx, cancel := b.ctx()
	defer cancel()
	start := b.next()
	acked := make(chan int64, 1024)
	stopPeak := redisPeak(ct.redis)
	began := time.Now()
	type result struct {
		up  *chunkupv1.Upload
		err error
	}
	done := make(chan result, 1)
	go func() {
		up, err := ct.cl.Upload(ctx, b.src.reader(start, n), client.WithSize(n), client.WithName("paused.bin"),
			client.WithProgress(func(p client.Progress) {
				select {
				case acked <- p.BytesAcked:
				default:
				}
			}))
		done <- result{up, err}
	}()
	var last int64
	latest := func() int64 {
		for {
			select {
			case v := <-acked:
				last = max(last, v)
			default:
				return last
			}
		}
	}
	for latest() < n/16 {
		select {
		case r := <-done:
			b.tb.Fatalf("bench: the upload ended before the pause: %v", r.err)
		case v := <-acked:
			last = max(last, v)
		}
	}
	if err := b.store.Pause(); err != nil {
		b.tb.Fatalf("bench: pause %s: %v", b.store.Name(), err)
	}
	before := latest()
	time.Sleep(pause) // the fault's duration
	during := latest() - before
	if err := b.store.Resume(); err != nil {
		b.tb.Fatalf("bench: resume %s: %v", b.store.Name(), err)
	}
	r := <-done
	res := pauseResult{Bytes: n, PauseSeconds: pause.Seconds(), AckedBeforeMiB: float64(before) / MiB,
		AckedDuringMiB: float64(during) / MiB, RedisPeakMiB: stopPeak(), Seconds: time.Since(began).Seconds()}
	if r.err != nil {
		b.tb.Fatalf("bench: upload across the pause: %v", r.err)
	}
	b.verifyAndDelete([]object{{r.up.Key, start, n}}) // fails the run unless exact
	res.Exact = true
	b.tb.Logf("bench: "+b.store.Name()+" paused %v mid-upload: %.0f MiB acknowledged before, %.0f MiB during; Redis peak %.0f MiB; object exact",
		pause, res.AckedBeforeMiB, res.AckedDuringMiB, res.RedisPeakMiB)
	return res
}
