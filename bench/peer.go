package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/internal/testenv"
)

// tusdTurn stands for an upload through tusd, the peer, in the order of a round.
var tusdTurn = &contender{name: "tusd"}

// peer is another upload service measured in the same rounds as chunkup and the direct
// uploads, fed as its users feed it: tusd with one PATCH for the large file and
// creation-with-upload for each small one.
type peer struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Peer, Chunkup and Direct are the medians of the rounds (Chunkup: the adaptive
	// contender's).
	Peer    float64 `json:"peer"`
	Chunkup float64 `json:"chunkup"`
	Direct  float64 `json:"direct"`
	// ChunkupToPeer is Chunkup / Peer; PeerToDirect is Peer / Direct.
	ChunkupToPeer float64 `json:"chunkup_to_peer"`
	PeerToDirect  float64 `json:"peer_to_direct"`
	// CPUPerGiB is the peer process's CPU seconds per GiB in its median round.
	CPUPerGiB float64 `json:"peer_cpu_s_per_gib"`
	// Rounds are each round's figures, the peer's then the direct upload's.
	Rounds [][2]float64 `json:"rounds"`
}

// summarizePeer takes the medians of the peer's rounds beside chunkup's comparison of the
// same rounds.
func summarizePeer(unit string, speeds, cpu, di []float64, chunkup comparison) peer {
	m := median(speeds)
	p := peer{Name: "tusd " + testenv.TusdVersion, Unit: unit, Peer: speeds[m], Chunkup: chunkup.Chunkup,
		Direct: di[median(di)], CPUPerGiB: cpu[m]}
	p.ChunkupToPeer, p.PeerToDirect = p.Chunkup/p.Peer, p.Peer/p.Direct
	for i := range speeds {
		p.Rounds = append(p.Rounds, [2]float64{speeds[i], di[i]})
	}
	return p
}

// viaTusd uploads n bytes through tusd in one PATCH and returns the elapsed time and
// tusd's CPU seconds per GiB.
func (b *bench) viaTusd(n int64) (time.Duration, float64) {
	ctx, cancel := b.ctx()
	defer cancel()
	start := b.next()
	b.settle()
	cpu := b.cpu(b.tusd.Pid())
	began := time.Now()
	id, err := b.tusUpload(ctx, b.tusd.URL, b.src.reader(start, n), n, 0)
	took := time.Since(began)
	if err != nil {
		b.tb.Fatalf("bench: tusd upload of %s: %v", human(n), err)
	}
	used := (b.cpu(b.tusd.Pid()) - cpu) / (float64(n) / (1 << 30))
	b.verifyAndDeleteTusd(ctx, []string{id}, []object{{start: start, n: n}})
	return took, used
}

// smallTusd uploads count small files through tusd, conc at a time, each with
// creation-with-upload, verifies and deletes them, and returns the files per second and
// tusd's CPU seconds per GiB.
func (b *bench) smallTusd(count, conc int) (float64, float64) {
	ctx, cancel := b.ctx()
	defer cancel()
	objs, data := b.smallInputs(count, "")
	ids := make([]string, count)
	b.settle()
	cpu := b.cpu(b.tusd.Pid())
	began := time.Now()
	errs := b.each(count, conc, func(i int) error {
		var err error
		ids[i], err = b.tusCreateWithUpload(ctx, b.tusd.URL, data[i])
		return err
	})
	took := time.Since(began)
	used := (b.cpu(b.tusd.Pid()) - cpu) / (float64(int64(count)*b.cfg.SmallSize) / (1 << 30))
	b.failOn(errs, "tusd")
	b.verifyAndDeleteTusd(ctx, ids, objs)
	return float64(count) / took.Seconds(), used
}

// verifyAndDeleteTusd checks the objects of tusd uploads ids (tusd's S3 store keeps an
// upload at the key before the "+" of its id, its info beside it) and deletes them.
func (b *bench) verifyAndDeleteTusd(ctx context.Context, ids []string, objs []object) {
	for i, id := range ids {
		key, _, _ := strings.Cut(id, "+")
		objs[i].key = key
		if _, err := b.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key + ".info")}); err != nil {
			b.tb.Fatalf("bench: delete tusd's %s.info: %v", key, err)
		}
	}
	b.verifyAndDelete(objs)
}

// startTusd starts the peer unless the run skips it.
func (b *bench) startTusd(skip []string) {
	if slices.Contains(skip, "tusd") {
		return
	}
	b.tusd = testenv.StartTusd(b.tb, b.store, bucket)
	b.tb.Logf("bench: peer tusd %s at %s (pid %d)", testenv.TusdVersion, b.tusd.URL, b.tusd.Pid())
}

// peerLine is the report's line on the peer.
func (p peer) line(what string) string {
	return fmt.Sprintf("%s, %s: %.1f %s (chunkup %.1f: %.3f×; direct %.1f: tusd %.3f×; tusd CPU %.2f s/GiB)",
		p.Name, what, p.Peer, p.Unit, p.Chunkup, p.ChunkupToPeer, p.Direct, p.PeerToDirect, p.CPUPerGiB)
}
