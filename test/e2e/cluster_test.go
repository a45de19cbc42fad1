package e2e

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/upload"
)

// shared is the Redis Cluster of the running TestOnCluster.
var shared struct {
	mu      sync.Mutex
	cluster *testenv.RedisCluster
}

// clusterFor is the cluster newEnv gives a test run under TestOnCluster, or nil.
func clusterFor(t testing.TB) *testenv.RedisCluster {
	if !strings.HasPrefix(t.Name(), "TestOnCluster/") {
		return nil
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.cluster
}

// TestOnCluster runs end-to-end tests, unchanged, against a Redis Cluster of three
// masters and three replicas: under it, newEnv hands out the cluster instead of a
// single redis-server, and chunkup connects with a redis+cluster:// URL (so the store
// shards its global indexes and uses sharded pub/sub). The tests share the cluster;
// each works on its own uploads. They run once per staging mode (the subtests
// adaptive/… and always/…; see stagingFor), since writing chunks through to S3 and
// staging them meet at the same records on a cluster as on a single Redis.
func TestOnCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	shared.mu.Lock()
	shared.cluster = c
	shared.mu.Unlock()
	t.Cleanup(func() {
		shared.mu.Lock()
		shared.cluster = nil
		shared.mu.Unlock()
	})
	tests := []struct {
		name string
		test func(*testing.T)
	}{
		// The core upload suite.
		{"UploadSizes", TestUploadSizes},
		{"OutOfOrderOverConcurrentStreams", TestOutOfOrderOverConcurrentStreams},
		{"LostWakeUp", TestLostWakeUp},
		{"BadInput", TestBadInput},
		{"CreateOnStreamThenChunks", TestCreateOnStreamThenChunks},
		{"Conformance", TestConformance},
		{"ResumeCannotMixInputs", TestResumeCannotMixInputs},
		// Crashes and races of workers and completers.
		{"WorkerKilledHoldingClaim", TestWorkerKilledHoldingClaim},
		{"CompletersRace", TestCompletersRace},
		// Progress, events, expiry and OCR.
		{"WatchProgress", TestWatchProgress},
		{"CompletedEventOnce", TestCompletedEventOnce},
		{"AbandonedUploadExpires", TestAbandonedUploadExpires},
		{"OCRDocumentsReachDecision", TestOCRDocumentsReachDecision},
		{"DocumentIdentityEndToEnd", TestDocumentIdentityEndToEnd},
		{"DocumentsThroughTheAPI", TestDocumentsThroughTheAPI},
		{"WokenByShardedPubSub", testWokenByShardedPubSub},
		// HTTP uploads: the append lock, its fence and the declared size in one slot.
		{"HTTPUnknownLength", TestHTTPUnknownLength},
		{"HTTPConcurrentAppends", TestHTTPConcurrentAppends},
		// Direct uploads: the parts' record and the completion's index on other nodes.
		{"DirectSDKAndCLI", TestDirectSDKAndCLI},
		// Several API and worker processes, no affinity, one worker killed.
		{"ManyReplicas", testManyReplicas},
	}
	for _, mode := range []string{upload.StagingAdaptive, upload.StagingAlways} {
		t.Run(mode, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, tc.test)
			}
		})
	}
}

// stagingFor is the staging mode of the processes test t starts: the mode a
// TestOnCluster subtest names (…/always/…), else the default.
func stagingFor(t testing.TB) string {
	for seg := range strings.SplitSeq(t.Name(), "/") {
		if seg == upload.StagingAlways || seg == upload.StagingAdaptive {
			return seg
		}
	}
	return upload.StagingAdaptive
}

// testWokenByShardedPubSub runs the API and the workers in separate processes, with
// sweeps an hour apart: only a wake-up on a sharded channel (SPUBLISH from the API,
// SSUBSCRIBE in the worker, on whichever masters serve the channels' slots) can get
// the chunks to S3 within the test's patience.
func testWokenByShardedPubSub(t *testing.T) {
	e := newEnv(t)
	if e.cluster == nil {
		t.Fatal("not on a cluster")
	}
	api := e.start(t, e.config("api"))
	cfg := e.config("worker", "completer")
	cfg.Worker.SweepInterval, cfg.Completer.SweepInterval = time.Hour, time.Hour
	e.start(t, cfg)
	c := e.client(t, api)
	for i := range 4 { // uploads whose ids fall on several wake-up shards
		data := randomBytes(2*chunk+int(i), uint64(40+i))
		up, err := c.Upload(ctx(t), reader(data))
		if err != nil {
			t.Fatal(err)
		}
		e.requireExact(t, up, data)
	}
}
