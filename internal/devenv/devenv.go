// Package devenv starts everything chunkup depends on inside one process on loopback,
// for `chunkup dev`: Redis (a spawned redis-server when one is on PATH, else an
// embedded one), an S3-compatible store keeping objects on disk, and a Kafka broker
// (franz-go's kfake). chunkup itself then runs unchanged against them.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3afero"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/afero"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Redis modes.
// RedisMallocConf is the allocator setting for a redis-server that stages chunks: freed
// pages are kept for reuse (docs/performance.md, "Redis and its allocator"). It is the
// environment of the redis-server dev spawns, and the setting docs/configuration.md
// recommends.
const RedisMallocConf = "MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1"

const (
	RedisAuto     = "auto"     // redis-server from PATH if there is one, else embedded
	RedisSpawn    = "spawn"    // redis-server from PATH, or fail
	RedisEmbedded = "embedded" // in-process (miniredis)
)

// Config says where to keep data and listen. Zero values mean the documented defaults.
type Config struct {
	// DataDir holds Redis' append-only file, the S3 objects and Kafka's log. Required.
	DataDir string
	// Redis is RedisAuto (zero), RedisSpawn or RedisEmbedded.
	Redis string
	// RedisAddr, S3Addr and KafkaAddr are loopback host:port to listen on; port 0 (or
	// zero values) picks free ports.
	RedisAddr, S3Addr, KafkaAddr string
	// Topic is created up front. Zero means chunkup.uploads.
	Topic  string
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("devenv: a data directory is required")
	}
	switch c.Redis {
	case "", RedisAuto, RedisSpawn, RedisEmbedded:
	default:
		return fmt.Errorf("devenv: redis mode %q: use auto, spawn or embedded", c.Redis)
	}
	return nil
}

// Env is the running dependencies.
type Env struct {
	RedisURL string
	// RedisKind says which Redis runs: "redis-server" or "embedded".
	RedisKind  string
	S3Endpoint string
	S3Dir      string
	KafkaAddr  string
	Topic      string

	cfg     Config
	closers []func()
}

// Start locks the data directory and starts the dependencies; Close stops them. It is
// Prepare and Env.Start in one.
func Start(ctx context.Context, cfg Config) (*Env, error) {
	env, err := Prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := env.Start(ctx); err != nil {
		env.Close()
		return nil, err
	}
	return env, nil
}

// Prepare checks the configuration and locks the data directory (a *LockedError when
// another process holds it), starting nothing, so that a second `chunkup dev` on the
// same directory stops before it touches anything. Close releases the lock.
func Prepare(cfg Config) (*Env, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Topic == "" {
		cfg.Topic = "chunkup.uploads"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	unlock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	env := &Env{Topic: cfg.Topic, cfg: cfg}
	env.closers = append(env.closers, unlock) // runs last: after redis-server has exited
	return env, nil
}

// Start starts the dependencies: the in-process ones first, so that an address in use
// fails before a redis-server is spawned. After an error, Close stops what started.
func (e *Env) Start(ctx context.Context) error {
	if err := e.startS3(e.cfg); err != nil {
		return err
	}
	if err := e.startKafka(e.cfg); err != nil {
		return err
	}
	return e.startRedis(ctx, e.cfg)
}

// Close stops everything Start started and releases the data directory. It may be
// called more than once, and on a nil *Env.
func (e *Env) Close() {
	if e == nil {
		return
	}
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}

func loopback(addr string) (string, int, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if port == 0 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return "", 0, err
		}
		port = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	return host, port, nil
}

func (e *Env) startRedis(ctx context.Context, cfg Config) error {
	bin, lookErr := exec.LookPath("redis-server")
	mode := cfg.Redis
	if mode == "" || mode == RedisAuto {
		mode = RedisEmbedded
		if lookErr == nil {
			mode = RedisSpawn
		}
	}
	host, port, err := loopback(cfg.RedisAddr)
	if err != nil {
		return fmt.Errorf("redis address: %w", err)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	if mode == RedisEmbedded {
		m := miniredis.NewMiniRedis()
		if err := m.StartAddr(addr); err != nil {
			return fmt.Errorf("embedded redis: %w", err)
		}
		e.closers = append(e.closers, m.Close)
		e.RedisURL, e.RedisKind = "redis://"+m.Addr()+"/0", "embedded"
		return nil
	}
	if lookErr != nil {
		return fmt.Errorf("redis-server is not on PATH (use --redis embedded): %w", lookErr)
	}
	dir := filepath.Join(cfg.DataDir, "redis")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", host, "--dir", dir,
		"--appendonly", "yes", "--save", "", "--maxmemory-policy", "noeviction", "--protected-mode", "no")
	// The kernel kills redis-server when this process dies, even by SIGKILL, so a
	// crashed dev leaves no Redis on the data directory. (Pdeathsig follows the OS
	// thread that started the child; Go ends a thread only when a goroutine locked to it
	// exits, which nothing in this process does.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	// Staged chunks are large strings allocated and freed over and over; jemalloc's
	// default decay hands their pages back to the kernel, and faulting them in again
	// cost Redis 15 times the CPU (docs/performance.md, "Redis and its allocator").
	cmd.Env = append(os.Environ(), RedisMallocConf)
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	e.closers = append(e.closers, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	e.RedisURL, e.RedisKind = "redis://"+addr+"/0", "redis-server"
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := rdb.Ping(ctx).Err(); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited at start (%s); see %s", lastLine(logf.Name()), logf.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer on %s; see %s", addr, logf.Name())
		}
	}
}

// lastLine is the last non-empty line of the file at path, which is where redis-server
// says why it stopped.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func (e *Env) startS3(cfg Config) error {
	e.S3Dir = filepath.Join(cfg.DataDir, "s3")
	if err := os.MkdirAll(e.S3Dir, 0o755); err != nil {
		return err
	}
	backend, err := s3afero.MultiBucket(afero.NewBasePathFs(afero.NewOsFs(), e.S3Dir))
	if err != nil {
		return fmt.Errorf("embedded s3: %w", err)
	}
	etags := newMultipartETags(backend, filepath.Join(e.S3Dir, "multipart-etags"))
	parts, err := newDiskMultipart(filepath.Join(cfg.DataDir, "s3-multipart"), etags, time.Now)
	if err != nil {
		return err
	}
	faker := gofakes3.New(struct {
		*multipartETags
		*diskMultipart
	}{etags, parts}, gofakes3.WithAutoBucket(true), gofakes3.WithLogger(gofakes3.DiscardLog()))
	addr := cfg.S3Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("embedded s3: %w", err)
	}
	srv := &http.Server{Handler: browserCORS(emptyParts(parts, etags.handler(faker.Server()))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	e.closers = append(e.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	e.S3Endpoint = "http://" + l.Addr().String()
	return nil
}

func (e *Env) startKafka(cfg Config) error {
	_, port, err := loopback(cfg.KafkaAddr)
	if err != nil {
		return fmt.Errorf("kafka address: %w", err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.AllowAutoTopicCreation(),
		kfake.DataDir(filepath.Join(cfg.DataDir, "kafka")), kfake.SeedTopics(1, cfg.Topic))
	if err != nil {
		return fmt.Errorf("embedded kafka: %w", err)
	}
	e.closers = append(e.closers, c.Close)
	e.KafkaAddr = c.ListenAddrs()[0]
	return nil
}
