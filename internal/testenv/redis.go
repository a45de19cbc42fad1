package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a server may take to become ready.
const startTimeout = 60 * time.Second

// Redis is a redis-server started by StartRedis.
type Redis struct {
	// Addr is host:port, e.g. 127.0.0.1:41234.
	Addr string
	// Port is the TCP port on 127.0.0.1. It stays the same across Restart.
	Port int
	// Dir is the server's working directory, where RDB and AOF files go. It stays the
	// same across Restart.
	Dir string
	// LogFile is the server's log (all its runs, appended).
	LogFile string

	bin  string
	args []string
	env  []string

	daemon
}

type redisConfig struct {
	aof   bool
	extra []string
	env   []string
}

// RedisOption configures StartRedis.
type RedisOption func(*redisConfig)

// WithAOF turns on the append-only file with appendfsync always, so that every write is
// on disk before Redis answers and survives Kill and Restart.
func WithAOF() RedisOption { return func(c *redisConfig) { c.aof = true } }

// WithArgs passes extra redis-server arguments, after testenv's own, so they win over
// them: e.g. WithArgs("--maxmemory", "16mb", "--maxmemory-policy", "allkeys-lru").
func WithArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.extra = append(c.extra, args...) }
}

// WithEnv adds NAME=VALUE pairs to redis-server's environment: e.g.
// WithEnv("MALLOC_CONF=dirty_decay_ms:-1") to tune its allocator.
func WithEnv(env ...string) RedisOption {
	return func(c *redisConfig) { c.env = append(c.env, env...) }
}

// StartRedis starts a redis-server on a free 127.0.0.1 port with its own directory, no
// RDB snapshots, no AOF (unless WithAOF), maxmemory-policy noeviction, and waits until it
// answers PING. The test fails at once if redis-server is not installed. The server is
// stopped when the test ends.
func StartRedis(t TB, opts ...RedisOption) *Redis {
	t.Helper()
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := RedisServerBinary()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	base := t.TempDir()
	r := &Redis{
		Dir:     filepath.Join(base, "data"),
		LogFile: filepath.Join(base, "redis.log"),
		bin:     bin,
	}
	if err := os.Mkdir(r.Dir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	appendonly := "no"
	if cfg.aof {
		appendonly = "yes"
	}
	r.args = []string{
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--daemonize", "no",
		"--logfile", "", // log to stdout, which goes to LogFile
		"--save", "",
		"--appendonly", appendonly,
		"--appendfsync", "always",
		"--maxmemory-policy", "noeviction",
	}
	r.args = append(r.args, cfg.extra...)
	r.env = cfg.env
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: redis %s log (last lines):\n%s", r.Addr, tailFile(r.LogFile, 40))
		}
		r.Stop()
	})

	// The port was free a moment ago; another process may have taken it since.
	for attempt := 1; ; attempt++ {
		r.Port = FreePort(t)
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(r.Port))
		err := r.start()
		if err == nil {
			return r
		}
		if attempt == 3 || !strings.Contains(tailFile(r.LogFile, 10), "in use") {
			t.Fatalf("testenv: redis-server on %s: %v\nlog:\n%s", r.Addr, err, tailFile(r.LogFile, 40))
		}
	}
}

func (r *Redis) start() error {
	return r.launch(r.run)
}

func (r *Redis) run() (*proc, error) {
	log, err := os.OpenFile(r.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close() // the child has its own copy
	args := append([]string{"--port", strconv.Itoa(r.Port)}, r.args...)
	p, err := startProc(r.bin, args, append(os.Environ(), r.env...), log, log)
	if err != nil {
		return nil, err
	}
	if err := waitFor(startTimeout, p.done, func() error { return redisPing(r.Addr) }); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// redisPing sends PING over a fresh connection and expects +PONG (not -LOADING, which a
// server answers while it replays its AOF).
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// URL is the server's address as a redis URL for database 0: redis://127.0.0.1:PORT/0.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Client returns a go-redis client for the server, closed when t ends. It reconnects by
// itself after Restart.
func (r *Redis) Client(t TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Start starts a stopped or killed server again on the same port and directory, and
// waits until it answers PING. It does nothing if the server is running. t reports a
// failure to start; the server still lives as long as the test that started it first.
func (r *Redis) Start(t TB) {
	t.Helper()
	if err := r.start(); err != nil {
		t.Fatalf("testenv: restart redis-server on %s: %v\nlog:\n%s", r.Addr, err, tailFile(r.LogFile, 40))
	}
}

// Restart stops the server (if running) and starts it again on the same port and
// directory. With WithAOF it keeps its data.
func (r *Redis) Restart(t TB) {
	t.Helper()
	r.Stop()
	r.Start(t)
}
