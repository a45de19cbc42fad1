package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/internal/testenv"
)

// Running is a chunkup process run in this test process (the same App as `chunkup
// serve`).
type Running struct {
	*app.App
	stop func()
}

// Stop shuts the process down gracefully and waits for it.
func (r *Running) Stop() { r.stop() }

// StartApp runs an App with cfg until the test ends (or Stop).
func StartApp(t testing.TB, cfg app.Config) *Running {
	t.Helper()
	a, err := app.New(Ctx(t, 3*time.Minute), cfg)
	if err != nil {
		t.Fatalf("start chunkup: %v", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("chunkup run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &Running{App: a, stop: stop}
}

// Binary is the chunkup binary under test: $CHUNKUP_CHAOS_BIN when set (to run a suite
// against a release build), else cmd/chunkup built from this tree.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CHUNKUP_CHAOS_BIN"); p != "" {
		binOnce.Do(func() { t.Logf("testing the chunkup binary %s ($CHUNKUP_CHAOS_BIN)", p) })
		return p
	}
	return testenv.BuildBinary(t, "github.com/chunkup/chunkup/cmd/chunkup")
}

var binOnce sync.Once

// NodeConfig says how to run one `chunkup serve` process.
type NodeConfig struct {
	Name, Roles string
	RedisURL    string
	// MinIO gives the S3 endpoint and credentials (MinIO, or another S3 server of
	// testenv); S3Endpoint, when set, replaces the endpoint (a proxy in front of it).
	MinIO      testenv.S3Server
	S3Endpoint string
	Bucket     string
	// KafkaAddr and Topic, when set, publish events there.
	KafkaAddr, Topic string
	// Flags are added after the defaults (later flags win).
	Flags []string
}

// Node is a `chunkup serve` process that can be killed and started again with the same
// arguments (and so on the same addresses).
type Node struct {
	Name               string
	GRPCAddr, HTTPAddr string
	Proc               *testenv.Process
	bin                string
	args, env          []string
}

// startAttempts is how many times StartNode starts a process on fresh ports: a port
// testenv.FreePort found free may be taken by another process before chunkup binds it.
const startAttempts = 4

// StartNode runs `chunkup serve` as cfg says, with 5 MiB chunks and short leases and
// sweeps, so that recovery paths run within a test's patience, and waits until it is
// ready.
func StartNode(t testing.TB, cfg NodeConfig) *Node {
	t.Helper()
	s3 := cfg.MinIO.S3Config()
	endpoint := cfg.S3Endpoint
	if endpoint == "" {
		endpoint = s3.Endpoint
	}
	n := &Node{Name: cfg.Name, bin: Binary(t),
		env: []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey}}
	for attempt := 1; ; attempt++ {
		n.GRPCAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		n.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		n.args = []string{"serve", "--instance-id", cfg.Name, "--roles", cfg.Roles,
			"--grpc-addr", n.GRPCAddr, "--http-addr", n.HTTPAddr, "--redis-url", cfg.RedisURL,
			"--s3-endpoint", endpoint, "--s3-bucket", cfg.Bucket, "--chunk-size", "5MiB",
			"--lease", "1s", "--completer-lease", "1s", "--sweep-interval", "100ms", "--shutdown-timeout", "3s"}
		if cfg.KafkaAddr != "" {
			n.args = append(n.args, "--kafka-brokers", cfg.KafkaAddr, "--kafka-topic", cfg.Topic)
		}
		n.args = append(n.args, cfg.Flags...)
		err := n.tryStart(t)
		if err == nil {
			return n
		}
		if !errors.Is(err, testenv.ErrAddrInUse) || attempt >= startAttempts {
			t.Fatal(err)
		}
		t.Logf("%v; starting it again on other ports", err)
	}
}

// Start starts the process again and waits until /readyz answers 200.
func (n *Node) Start(t testing.TB) {
	t.Helper()
	if err := n.tryStart(t); err != nil {
		t.Fatal(err)
	}
}

// tryStart starts the process and waits until it is ready (testenv.Ready).
func (n *Node) tryStart(t testing.TB) error {
	t.Helper()
	n.Proc = testenv.StartProcess(t, n.bin, n.args, n.env)
	if err := testenv.Ready(n.Proc, n.HTTPAddr); err != nil {
		return fmt.Errorf("%s: %w", n.Name, err)
	}
	return nil
}

// Kill sends SIGKILL to the process (kill -9) and waits for it to die.
func (n *Node) Kill(t testing.TB) {
	t.Helper()
	pid := n.Proc.Pid()
	n.Proc.Kill()
	t.Logf("INJECT: kill -9 %s (pid %d)", n.Name, pid)
}

// Restart starts a killed process again with the same arguments and addresses.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	n.Start(t)
	t.Logf("INJECT: restarted %s on the same addresses (pid %d)", n.Name, n.Proc.Pid())
}
