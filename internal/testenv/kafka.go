package testenv

import (
	"fmt"
	"path/filepath"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is an in-process Kafka broker (franz-go's kfake, which speaks the real wire
// protocol) on a fixed loopback port with its data on disk, so it can be stopped to
// make Kafka unreachable and started again with the same address and messages.
type Kafka struct {
	// Addr is the bootstrap address, host:port.
	Addr   string
	Topics []string

	port int
	dir  string
	mu   sync.Mutex
	c    *kfake.Cluster
}

// StartKafka starts a one-broker cluster with topics (one partition each); other
// topics are created on first use. It stops when the test ends.
func StartKafka(t TB, topics ...string) *Kafka {
	t.Helper()
	k := &Kafka{Topics: topics, port: FreePort(t), dir: filepath.Join(t.TempDir(), "kafka")}
	k.Addr = fmt.Sprintf("127.0.0.1:%d", k.port)
	k.Start(t)
	t.Cleanup(k.Stop)
	return k
}

// Start starts the broker again after Stop (a no-op while it runs).
func (k *Kafka) Start(t TB) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		return
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1), kfake.Ports(k.port), kfake.DataDir(k.dir), kfake.AllowAutoTopicCreation(),
	}
	if len(k.Topics) > 0 {
		opts = append(opts, kfake.SeedTopics(1, k.Topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv: start kafka on %s: %v", k.Addr, err)
	}
	k.c = c
}

// Stop closes the broker: clients see connection refused until Start.
func (k *Kafka) Stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}
