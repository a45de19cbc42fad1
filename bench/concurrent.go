package main

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// concurrentCase is a row of many uploads at once: Count uploads of Bytes, Conc at a
// time.
type concurrentCase struct {
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
	Conc  int   `json:"concurrency"`
}

func (c concurrentCase) String() string {
	return fmt.Sprintf("%d × %s @%d", c.Count, human(c.Bytes), c.Conc)
}

// parseConcurrent reads "COUNTxSIZE@CONC,…".
func parseConcurrent(s string) ([]concurrentCase, error) {
	var out []concurrentCase
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		count, rest, ok1 := strings.Cut(f, "x")
		size, conc, ok2 := strings.Cut(rest, "@")
		n, err1 := strconv.Atoi(count)
		b, err2 := parseSize(size)
		c, err3 := strconv.Atoi(conc)
		if !ok1 || !ok2 || err1 != nil || err2 != nil || err3 != nil || n < 1 || b < 1 || c < 1 {
			return nil, fmt.Errorf("concurrent case %q: want COUNTxSIZE@CONCURRENCY, e.g. 256x256KiB@128", f)
		}
		out = append(out, concurrentCase{Count: n, Bytes: b, Conc: c})
	}
	return out, nil
}

// concurrentRow is one concurrentCase through chunkup (the adaptive contender, the SDK)
// against the same uploads straight to S3, the medians of the rounds.
type concurrentRow struct {
	concurrentCase
	// Chunkup and Direct are MiB/s over all the uploads of a round.
	Chunkup float64 `json:"chunkup_mib_s"`
	Direct  float64 `json:"direct_mib_s"`
	Ratio   float64 `json:"ratio"`
	// Cost is chunkup's in its median round.
	Cost cost `json:"chunkup_cost"`
}

// compareConcurrent alternates the case through chunkup and straight to S3 (PutObject
// below the part size, the transfer manager from it), Rounds times.
func (b *bench) compareConcurrent(c concurrentCase) concurrentRow {
	var ch, di []float64
	var costs []cost
	total := int64(c.Count) * c.Bytes
	for r := range b.cfg.Rounds {
		for _, ct := range b.order(r) {
			if ct == nil {
				di = append(di, mibps(total, b.manyDirect(c)))
				continue
			}
			if ct != b.adaptive {
				continue
			}
			took, k := b.manyChunkup(c)
			ch, costs = append(ch, mibps(total, took)), append(costs, k)
		}
		b.tb.Logf("bench: %s round %d: chunkup %.1f MiB/s, direct %.1f MiB/s", c, r+1, ch[r], di[r])
	}
	m := median(ch)
	row := concurrentRow{concurrentCase: c, Chunkup: ch[m], Direct: di[median(di)], Cost: costs[m]}
	row.Ratio = row.Chunkup / row.Direct
	return row
}

// manyChunkup uploads the case through the adaptive contender's SDK client.
func (b *bench) manyChunkup(c concurrentCase) (time.Duration, cost) {
	ctx, cancel := b.ctx()
	defer cancel()
	objs := make([]object, c.Count)
	for i := range objs {
		objs[i] = object{start: b.next(), n: c.Bytes}
	}
	m := b.startMeter(b.adaptive)
	errs := b.each(c.Count, c.Conc, func(i int) error {
		up, err := b.adaptive.cl.Upload(ctx, b.src.reader(objs[i].start, c.Bytes), client.WithSize(c.Bytes), client.WithName("many.bin"))
		if err == nil && up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
			err = fmt.Errorf("upload %s ended %s", up.UploadId, up.State)
		}
		if err == nil {
			objs[i].key = up.Key
		}
		return err
	})
	took, k := m.stop(int64(c.Count) * c.Bytes)
	b.failOn(errs, "chunkup "+c.String())
	b.verifyAndDelete(objs)
	return took, k
}

// manyDirect uploads the case straight to S3: PutObject of bytes in memory below the
// part size (as a user would), the transfer manager from it.
func (b *bench) manyDirect(c concurrentCase) time.Duration {
	ctx, cancel := b.ctx()
	defer cancel()
	objs := make([]object, c.Count)
	var data [][]byte
	for i := range objs {
		start := b.next()
		objs[i] = object{key: fmt.Sprintf("direct/many-%d", start), start: start, n: c.Bytes}
		if c.Bytes < b.cfg.PartSize {
			data = append(data, b.src.bytes(objs[i].start, c.Bytes))
		}
	}
	b.settle()
	began := time.Now()
	errs := b.each(c.Count, c.Conc, func(i int) error {
		if data != nil {
			_, err := b.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(objs[i].key),
				Body: bytes.NewReader(data[i]), ContentLength: aws.Int64(c.Bytes)})
			return err
		}
		_, err := b.direct.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(bucket), Key: aws.String(objs[i].key),
			Body: b.src.reader(objs[i].start, c.Bytes)})
		return err
	})
	took := time.Since(began)
	b.failOn(errs, "direct "+c.String())
	b.verifyAndDelete(objs)
	return took
}
