package e2e

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/test/harness"
)

// testManyReplicas runs two API processes and two worker processes (each also
// completer, publisher and cleanup) on the cluster, with no affinity between them: 50
// concurrent uploads are spread over both APIs, a fifth of them start on one API and
// are resumed on the other, and one worker is killed (-9) midway. Every object must be
// exact, and every upload's UploadCompleted event on Kafka.
func testManyReplicas(t *testing.T) {
	e := newEnv(t)
	k := testenv.StartKafka(t, topic)
	api1 := e.serveProcess(t, k, "api-1", "api")
	api2 := e.serveProcess(t, k, "api-2", "api")
	worker1 := e.serveProcess(t, k, "worker-1", "worker,completer,publisher,cleanup")
	e.serveProcess(t, k, "worker-2", "worker,completer,publisher,cleanup")
	apis := []*client.Client{dial(t, api1.GRPCAddr), dial(t, api2.GRPCAddr)}

	const uploads = 50
	const chunkSize = 5 * MiB
	inputs := make([][]byte, uploads)
	results := make([]*chunkupv1.Upload, uploads)
	errs := make([]error, uploads)
	var completed atomic.Int32
	var wg sync.WaitGroup
	for i := range uploads {
		inputs[i] = randomBytes(i%4*chunkSize+i*1000+1, uint64(100+i))
		wg.Go(func() {
			defer completed.Add(1)
			c := apis[i%2]
			if i%5 != 0 {
				results[i], errs[i] = c.Upload(ctx(t), reader(inputs[i]), client.WithSize(int64(len(inputs[i]))))
				return
			}
			// Create and send the first chunk on one API, resume on the other.
			results[i], errs[i] = resumeElsewhere(t, c, apis[(i+1)%2], inputs[i])
		})
	}
	waitFor(t, "a third of the uploads to finish", func() bool { return completed.Load() >= uploads/3 })
	worker1.Kill(t)
	t.Logf("killed worker-1 (-9) with %d of %d uploads finished", completed.Load(), uploads)
	wg.Wait()

	for i := range uploads {
		if errs[i] != nil {
			t.Fatalf("upload %d: %v", i, errs[i])
		}
		e.requireExact(t, results[i], inputs[i])
	}
	var evs []harness.Event
	waitFor(t, "every UploadCompleted event", func() bool {
		evs = allEvents(t, k)
		for _, up := range results {
			if len(harness.EventsFor(evs, up.UploadId, "chunkup.v1.UploadCompleted")) == 0 {
				return false
			}
		}
		return true
	})
	waitFor(t, "no multipart upload left open", func() bool { return e.openMultipartUploads(t) == 0 })
	t.Logf("%d uploads exact, %d events for them", uploads, len(evs))
}

// resumeElsewhere creates an upload on a, sends its first chunk there on a stream of
// its own, then lets the SDK send the rest through b, which learns from GetUpload that
// chunk 1 is received, and waits for it to complete.
func resumeElsewhere(t *testing.T, a, b *client.Client, data []byte) (*chunkupv1.Upload, error) {
	created, err := a.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))})
	if err != nil {
		return nil, err
	}
	up := created.Upload
	first := data[:min(len(data), int(up.ChunkSize))]
	stream, err := a.API().UploadChunk(ctx(t))
	if err != nil {
		return nil, err
	}
	if err := stream.Send(&chunkupv1.UploadChunkRequest{UploadId: up.UploadId, ChunkNumber: 1, Data: first,
		Crc32C: proto.Uint32(crc.Checksum(first)), IsLast: len(first) == len(data)}); err != nil {
		return nil, err
	}
	if _, err := stream.Recv(); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	if up, err = b.Get(ctx(t), up.UploadId); err != nil {
		return nil, err
	}
	if len(up.ReceivedChunks) != 1 {
		return nil, fmt.Errorf("after chunk 1 on the first API, the second reports %v received", up.ReceivedChunks)
	}
	if err := b.Send(ctx(t), up, reader(data)); err != nil {
		return nil, err
	}
	return b.Wait(ctx(t), up.UploadId)
}

// TestClusterFailover kills (-9) the Redis master that holds an upload's keys while
// uploads are in flight, with --redis-min-replicas 1: a chunk is acknowledged only once
// a replica has it, so the promoted replica holds every acknowledged chunk. The uploads
// finish (clients and workers retry through the failover), every object is exact, and
// every chunk acknowledged before the kill is still recorded afterwards.
func TestClusterFailover(t *testing.T) {
	cluster := testenv.StartRedisCluster(t)
	e := &env{t: t, cluster: cluster, minio: testenv.StartMinIO(t)}
	e.s3 = e.minio.Client(t)
	cfg := e.config("api", "worker", "completer", "cleanup")
	cfg.Staging.MinReplicas, cfg.Staging.ReplicaTimeout = 1, 2*time.Second
	a := e.start(t, cfg)
	acks := &ackLog{acked: map[string]map[uint32]bool{}}
	c := e.client(t, a, client.WithWindow(2),
		client.WithRetry(40, 50*time.Millisecond, time.Second),
		client.WithDialOptions(grpc.WithStreamInterceptor(acks.intercept)))

	const uploads = 6
	inputs := make([][]byte, uploads)
	results := make([]*chunkupv1.Upload, uploads)
	errs := make([]error, uploads)
	// Each upload's first three chunks flow at once; the rest wait for the gate, which
	// opens when the master is dead: the uploads are mid-way, and their streams run
	// into the failover.
	gate := make(chan struct{})
	openGate := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(openGate)
	ids := make(chan string, uploads)
	var wg sync.WaitGroup
	for i := range uploads {
		inputs[i] = randomBytes(6*chunk+i, uint64(200+i))
		wg.Go(func() {
			var once sync.Once
			results[i], errs[i] = c.Upload(ctx(t), &gatedReader{r: reader(inputs[i]), free: 3 * chunk, gate: gate},
				client.WithSize(int64(len(inputs[i]))), client.WithProgress(func(p client.Progress) {
					if p.BytesAcked >= 2*chunk {
						once.Do(func() { ids <- p.UploadID })
					}
				}))
		})
	}
	var victim string
	for range uploads { // every upload has chunks acknowledged
		victim = <-ids
	}
	master := cluster.MasterFor(t, "{"+victim+"}")
	cluster.Kill(t, master)
	// What the client had been told was durable when the master died (a chunk staged
	// but not yet confirmed by a replica may be lost; it was never acknowledged).
	before := acks.of(victim)
	openGate()
	t.Logf("killed master %s of upload %s (chunks %v acknowledged)", master, victim, before)
	cluster.WaitFailover(t, master)

	// The cluster has a new master; chunkup's Redis client learns it on its next
	// refresh of the cluster's slots (within a second or so), and until then answers
	// UNAVAILABLE, "retry later", as a caller would.
	var after *chunkupv1.Upload
	harness.Poll(t, "GetUpload after the failover", 30*time.Second, func() error {
		r, err := c.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: victim})
		if status.Code(err) == codes.Unavailable {
			return err
		}
		if err != nil {
			t.Fatalf("get upload %s: %v", victim, err)
		}
		after = r.Upload
		return nil
	})
	kept := map[uint32]bool{}
	for _, n := range after.ReceivedChunks {
		kept[n] = true
	}
	for _, n := range before {
		if !kept[n] {
			t.Errorf("chunk %d of upload %s was acknowledged before the failover and is gone after it", n, victim)
		}
	}
	t.Logf("after the failover upload %s has chunks %v received", victim, after.ReceivedChunks)
	wg.Wait()
	for i := range uploads {
		if errs[i] != nil {
			t.Fatalf("upload %d: %v", i, errs[i])
		}
		e.requireExact(t, results[i], inputs[i])
	}
}

// ackLog records the chunk acknowledgements a client received, per upload.
type ackLog struct {
	mu    sync.Mutex
	acked map[string]map[uint32]bool
}

// intercept is a gRPC stream interceptor that records every UploadChunkResponse.
func (l *ackLog) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &ackStream{ClientStream: cs, log: l}, nil
}

type ackStream struct {
	grpc.ClientStream
	log *ackLog
}

func (s *ackStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*chunkupv1.UploadChunkResponse); ok && err == nil && r.ChunkNumber > 0 {
		s.log.mu.Lock()
		if s.log.acked[r.UploadId] == nil {
			s.log.acked[r.UploadId] = map[uint32]bool{}
		}
		s.log.acked[r.UploadId][r.ChunkNumber] = true
		s.log.mu.Unlock()
	}
	return err
}

// of returns the chunks of upload id acknowledged so far, ascending.
func (l *ackLog) of(id string) []uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ns []uint32
	for n := range l.acked[id] {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// gatedReader reads free bytes of r at once and the rest only after gate is closed.
type gatedReader struct {
	r    io.Reader
	free int
	gate <-chan struct{}
}

func (g *gatedReader) Read(p []byte) (int, error) {
	if g.free == 0 {
		<-g.gate
		return g.r.Read(p)
	}
	n, err := g.r.Read(p[:min(len(p), g.free)])
	g.free -= n
	return n, err
}

// TestFailoverConverges runs two `chunkup serve --redis-min-replicas 1` processes on a
// Redis Cluster and, ten times in a row, kills (-9) the master that holds one upload's
// keys while six uploads spread over both processes are mid-way, then brings the killed
// node back (as a replica). Every upload must finish exact: none may wait for ever on a
// chunk whose part record, pending entry or completion entry the failover took away.
func TestFailoverConverges(t *testing.T) {
	cluster := testenv.StartRedisCluster(t)
	e := &env{t: t, cluster: cluster, minio: testenv.StartMinIO(t)}
	e.s3 = e.minio.Client(t)
	e.minio.CreateBucket(t, bucket)
	flags := []string{"--redis-min-replicas", "1", "--redis-replica-timeout", "2s", "--reconcile-interval", "2s"}
	nodes := []*harness.Node{e.serveProcess(t, nil, "a", "api,worker,completer,cleanup", flags...),
		e.serveProcess(t, nil, "b", "api,worker,completer,cleanup", flags...)}
	clients := []*client.Client{
		harness.Dial(t, nodes[0].GRPCAddr, client.WithWindow(2), client.WithRetry(60, 50*time.Millisecond, time.Second)),
		harness.Dial(t, nodes[1].GRPCAddr, client.WithWindow(2), client.WithRetry(60, 50*time.Millisecond, time.Second)),
	}
	const rounds, uploads = 10, 6
	for round := range rounds {
		inputs := make([][]byte, uploads)
		results := make([]*chunkupv1.Upload, uploads)
		errs := make([]error, uploads)
		ids := make(chan string, uploads)
		var wg sync.WaitGroup
		for i := range uploads {
			inputs[i] = randomBytes(3*5*MiB+i*1000, uint64(1000*round+i))
			wg.Go(func() {
				var once sync.Once
				results[i], errs[i] = clients[i%2].Upload(ctx(t), reader(inputs[i]), client.WithSize(int64(len(inputs[i]))),
					client.WithProgress(func(p client.Progress) {
						if p.BytesAcked >= 5*MiB {
							once.Do(func() { ids <- p.UploadID })
						}
					}))
			})
		}
		victim := <-ids
		master := cluster.MasterFor(t, "{"+victim+"}")
		cluster.Kill(t, master)
		t.Logf("round %d: killed master %s of upload %s", round+1, master, victim)
		cluster.WaitFailover(t, master)
		wg.Wait()
		for i := range uploads {
			if errs[i] != nil {
				t.Fatalf("round %d, upload %d: %v", round+1, i, errs[i])
			}
			e.requireExact(t, results[i], inputs[i])
		}
		cluster.Start(t, master) // back as a replica, so that every master has one again
	}
}
