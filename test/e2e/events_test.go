package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	"github.com/chunkup/chunkup/events"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/test/harness"
)

const topic = "chunkup.uploads"

// withKafka points cfg's publisher at k with fast retries.
func withKafka(cfg app.Config, k *testenv.Kafka) app.Config {
	cfg.KafkaBrokers, cfg.KafkaTopic = []string{k.Addr}, topic
	cfg.Publisher = events.PublisherConfig{Interval: 100 * time.Millisecond, Timeout: 2 * time.Second,
		RetryBase: 50 * time.Millisecond, RetryMax: 300 * time.Millisecond}
	return cfg
}

// allEvents reads every message on the topic, from the first offset to the last.
func allEvents(t *testing.T, k *testenv.Kafka) []harness.Event {
	return harness.Events(t, ctx(t), k.Addr, topic)
}

var eventsFor = harness.EventsFor

// waitOutboxEmpty waits until every recorded event has been acknowledged by Kafka.
func waitOutboxEmpty(t *testing.T, s *outbox.Outbox) {
	t.Helper()
	waitFor(t, "the outbox to drain", func() bool {
		n, err := s.Len(ctx(t))
		return err == nil && n == 0
	})
}

// TestCompletedEventOnce: a completed upload yields exactly one UploadCompleted, with the
// right size, checksum and headers, which a consumer group reads.
func TestCompletedEventOnce(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	a := e.start(t, withKafka(e.config(), k))
	c := e.client(t, a)
	data := randomBytes(chunk+4321, 21)
	up, err := c.Upload(ctx(t), reader(data), client.WithName("report.pdf"), client.WithContentType("application/pdf"), client.WithMetadata(map[string]string{"team": "blue"}))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)

	group := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{k.Addr}, Topic: topic, GroupID: "test-consumers",
		StartOffset: kafka.FirstOffset, MaxWait: 100 * time.Millisecond})
	defer group.Close()
	m, err := group.FetchMessage(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	ev := harness.EventOf(m)
	if ev.Type != "chunkup.v1.UploadCompleted" || ev.Key != up.UploadId || ev.ContentType != "application/json" ||
		ev.ID == "" || ev.CorrelationID != up.CorrelationId {
		t.Fatalf("event headers/key: %+v (upload %s, correlation %s)", ev, up.UploadId, up.CorrelationId)
	}
	var done chunkupv1.UploadCompleted
	if err := protojson.Unmarshal(ev.Value, &done); err != nil {
		t.Fatal(err)
	}
	if done.EventId != ev.ID || done.UploadId != up.UploadId || done.Size != int64(len(data)) ||
		done.ChecksumCrc32C != fmt.Sprintf("%08x", crc.Checksum(data)) || done.Etag != up.Etag ||
		done.Key != up.Key || done.Bucket != bucket || done.Name != "report.pdf" ||
		done.ContentType != "application/pdf" || done.Metadata["team"] != "blue" || done.NodeId == "" {
		t.Fatalf("event body: %v", &done)
	}
	if err := group.CommitMessages(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	waitOutboxEmpty(t, a.Outbox())
	if n := len(eventsFor(allEvents(t, k), up.UploadId, "chunkup.v1.UploadCompleted")); n != 1 {
		t.Fatalf("%d UploadCompleted events on the topic, want 1", n)
	}
}

// TestPublisherApartIsWoken: a publisher in a process of its own, whose interval is
// an hour, publishes the events another process records (a completion, an abort)
// without waiting for it: Redis tells it that they were recorded. Without that the
// events would wait out the hour, and the test its patience.
func TestPublisherApartIsWoken(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	pub := withKafka(e.config(app.RolePublisher), k)
	pub.GRPCAddr, pub.HTTPAddr = "off", "off"
	pub.Publisher.Interval = time.Hour
	e.start(t, pub)
	a := e.start(t, e.config(app.RoleAPI, app.RoleWorker, app.RoleCompleter, app.RoleCleanup))
	c := e.client(t, a)

	data := randomBytes(chunk+99, 31)
	up, err := c.Upload(ctx(t), reader(data), client.WithName("apart.bin"))
	if err != nil {
		t.Fatal(err)
	}
	e.requireExact(t, up, data)
	aborted, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "dropped.bin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.API().AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: aborted.Upload.UploadId}); err != nil {
		t.Fatal(err)
	}
	waitOutboxEmpty(t, a.Outbox())
	all := allEvents(t, k)
	if n := len(eventsFor(all, up.UploadId, "chunkup.v1.UploadCompleted")); n != 1 {
		t.Errorf("%d UploadCompleted events, want 1", n)
	}
	if n := len(eventsFor(all, aborted.Upload.UploadId, "chunkup.v1.UploadAborted")); n != 1 {
		t.Errorf("%d UploadAborted events, want 1", n)
	}
}

// TestEventsWaitOutKafkaOutage completes uploads while the broker is down; they
// complete anyway, their events wait in Redis, and all arrive once it is back.
func TestEventsWaitOutKafkaOutage(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	a := e.start(t, withKafka(e.config(), k))
	c := e.client(t, a)
	k.Stop()

	var ids []string
	for i := range 3 {
		data := randomBytes(1000*(i+1), uint64(30+i))
		up, err := c.Upload(ctx(t), reader(data))
		if err != nil {
			t.Fatal(err)
		}
		e.requireExact(t, up, data)
		ids = append(ids, up.UploadId)
	}
	if n, _ := a.Outbox().Len(ctx(t)); n != 3 {
		t.Fatalf("%d outboxes hold events while Kafka is down, want 3", n)
	}
	k.Start(t)
	waitOutboxEmpty(t, a.Outbox())
	evs := allEvents(t, k)
	for _, id := range ids {
		got := eventsFor(evs, id, "chunkup.v1.UploadCompleted")
		if len(got) == 0 {
			t.Errorf("no UploadCompleted for %s", id)
		}
		for _, ev := range got[1:] {
			if ev.ID != got[0].ID {
				t.Errorf("upload %s has events %s and %s: a redelivery must keep its event id", id, got[0].ID, ev.ID)
			}
		}
	}
}

// TestEventSurvivesKillBeforePublish kills (-9) a process after it completed an
// upload but before it could publish the event (its broker was down); a later
// publisher delivers the event.
func TestEventSurvivesKillBeforePublish(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	k.Stop()
	proc := e.serveProcess(t, k, "doomed", "api,worker,completer,publisher,cleanup")
	c := dial(t, proc.GRPCAddr)
	data := randomBytes(4096, 40)
	var up *chunkupv1.Upload
	waitFor(t, "the process to take an upload", func() bool {
		var err error
		up, err = c.Upload(ctx(t), reader(data))
		return err == nil
	})
	e.requireExact(t, up, data)
	proc.Kill(t)

	k.Start(t)
	a := e.start(t, withKafka(e.config("publisher"), k))
	waitOutboxEmpty(t, a.Outbox())
	if n := len(eventsFor(allEvents(t, k), up.UploadId, "chunkup.v1.UploadCompleted")); n != 1 {
		t.Fatalf("%d UploadCompleted events after the kill, want 1", n)
	}
}
