// Package harness is what chunkup's end-to-end suite (test/e2e) and fault-injection
// suite (test/chaos) share to run chunkup against real servers: processes (in this test
// process, or built from cmd/chunkup and started as their own), SDK clients, the bytes
// and events they produce read back from MinIO and Kafka, and the stores to look at
// Redis with. The servers themselves come from internal/testenv.
package harness

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/segmentio/kafka-go"

	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/events"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
)

// Ctx returns a context that ends after d or when the test ends.
func Ctx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	return testenv.Context(t, d)
}

// RandomBytes returns n reproducible pseudo-random bytes.
func RandomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1}).Read(b)
	return b
}

// Poll calls cond until it returns nil, and fails the test with cond's last error when
// d has passed.
func Poll(t testing.TB, what string, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %v", d, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Eventually polls cond until it holds, for up to two minutes.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Poll(t, what, 2*time.Minute, func() error {
		if !cond() {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

// Dial connects an SDK client to addr (plaintext), closed when the test ends.
func Dial(t testing.TB, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(addr, append([]client.Option{client.WithPollInterval(20 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Object reads object bucket/key back from S3.
func Object(t testing.TB, ctx context.Context, s3c *s3.Client, bucket, key string) []byte {
	t.Helper()
	out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("get object %s: %v", key, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read object %s: %v", key, err)
	}
	return b
}

// RequireExact checks that up completed and that S3 holds exactly want as its object in
// bucket.
func RequireExact(t testing.TB, ctx context.Context, s3c *s3.Client, bucket string, up *chunkupv1.Upload, want []byte) {
	t.Helper()
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		t.Fatalf("upload %s is %v (%s), want COMPLETED", up.UploadId, up.State, up.Error)
	}
	got := Object(t, ctx, s3c, bucket, up.Key)
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("object %s: %d bytes with sha256 %x, want %d bytes with sha256 %x",
			up.Key, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
	if up.Size != int64(len(want)) {
		t.Fatalf("upload reports size %d, want %d", up.Size, len(want))
	}
}

// Event is one message read back from a topic: its key, its headers, its value.
type Event struct {
	Type, ID, CorrelationID, ContentType, Key string
	Value                                     []byte
}

// EventOf reads an Event from a Kafka message.
func EventOf(m kafka.Message) Event {
	h := events.HeadersOf(m.Headers)
	return Event{Type: h.Type, ID: h.ID, CorrelationID: h.CorrelationID, ContentType: h.ContentType,
		Key: string(m.Key), Value: m.Value}
}

// EventsFor are the events of evs about upload id with type typ.
func EventsFor(evs []Event, id, typ string) []Event {
	var out []Event
	for _, ev := range evs {
		if ev.Key == id && ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

// Events reads every message on partition 0 of topic at broker, from the first offset
// to the last one there is when it is called.
func Events(t testing.TB, ctx context.Context, broker, topic string) []Event {
	t.Helper()
	var last int64
	Poll(t, "the Kafka topic's last offset", time.Minute, func() error {
		conn, err := kafka.DialLeader(ctx, "tcp", broker, topic, 0)
		if err != nil {
			return err
		}
		defer conn.Close()
		last, err = conn.ReadLastOffset()
		return err
	})
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{broker}, Topic: topic, Partition: 0, MaxWait: 100 * time.Millisecond})
	defer r.Close()
	var out []Event
	for int64(len(out)) < last {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("read the topic: %v", err)
		}
		out = append(out, EventOf(m))
	}
	return out
}

// PeakRSS is process pid's peak resident set (VmHWM), in bytes.
func PeakRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// ResetPeakRSS starts process pid's peak resident set again from its current one.
func ResetPeakRSS(t testing.TB, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatal(err)
	}
}
