package testenv_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/s3client"
	"github.com/chunkup/chunkup/internal/testenv"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// alive reports whether a process with this pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil // no /proc
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestCacheDir(t *testing.T) {
	t.Setenv("CHUNKUP_CACHE", "/x/y")
	if got := testenv.CacheDir(); got != "/x/y" {
		t.Fatalf("CacheDir with CHUNKUP_CACHE = %q", got)
	}
	t.Setenv("CHUNKUP_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	if got := testenv.CacheDir(); got != "/xdg/chunkup" {
		t.Fatalf("CacheDir with XDG_CACHE_HOME = %q", got)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got := testenv.CacheDir(); got != "/home/u/.cache/chunkup" {
		t.Fatalf("CacheDir with HOME = %q", got)
	}
	if got := testenv.BinDir(); got != "/home/u/.cache/chunkup/bin" {
		t.Fatalf("BinDir = %q", got)
	}
}

func TestFreePort(t *testing.T) {
	p := testenv.FreePort(t)
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatalf("FreePort %d is not free: %v", p, err)
	}
	l.Close()
}

func TestRedis(t *testing.T) {
	r := testenv.StartRedis(t)
	if !strings.HasPrefix(r.Addr, "127.0.0.1:") || r.URL() != "redis://"+r.Addr+"/0" {
		t.Fatalf("Addr %q URL %q", r.Addr, r.URL())
	}
	ctx := ctxT(t, 30*time.Second)
	c := r.Client(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"maxmemory-policy": "noeviction", "appendonly": "no", "save": "", "bind": "127.0.0.1",
	} {
		if cfg[k] != want {
			t.Errorf("config %s = %q, want %q", k, cfg[k], want)
		}
	}
	// The URL is what chunkup is configured with.
	opt, err := redis.ParseURL(r.URL())
	if err != nil || opt.Addr != r.Addr || opt.DB != 0 {
		t.Fatalf("ParseURL(%q) = %+v, %v", r.URL(), opt, err)
	}

	// Without AOF a restart loses the data.
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Restart(t)
	if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after restart without AOF: %v, want redis.Nil", err)
	}

	// Stop is idempotent, and a stopped server refuses connections.
	r.Stop()
	r.Stop()
	if _, err := net.DialTimeout("tcp", r.Addr, time.Second); err == nil {
		t.Fatal("stopped redis still accepts connections")
	}
	r.Start(t)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
}

func TestRedisAOFSurvivesKill(t *testing.T) {
	r := testenv.StartRedis(t, testenv.WithAOF(), testenv.WithArgs("--maxmemory", "64mb"))
	ctx := ctxT(t, 30*time.Second)
	c := r.Client(t)
	if got := c.ConfigGet(ctx, "maxmemory").Val()["maxmemory"]; got != "67108864" {
		t.Errorf("maxmemory = %q, want 64mb from WithArgs", got)
	}
	if err := c.Set(ctx, "k", "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr := r.Addr
	r.Kill()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Kill")
	}
	r.Restart(t)
	if r.Addr != addr {
		t.Fatalf("restart moved redis from %s to %s", addr, r.Addr)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "kept" {
		t.Fatalf("GET after kill -9 and restart with AOF = %q, %v", got, err)
	}
}

// TestRedisCleanup checks that a server started in a subtest is gone when it ends.
func TestRedisCleanup(t *testing.T) {
	var addr string
	t.Run("start", func(t *testing.T) {
		addr = testenv.StartRedis(t).Addr
	})
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("redis on %s still running after its test ended", addr)
	}
}

func TestMinIO(t *testing.T) {
	m := testenv.StartMinIO(t)
	if m.Endpoint != "http://"+m.Addr || m.Region != "us-east-1" || m.AccessKey == "" || m.SecretKey == "" {
		t.Fatalf("unexpected MinIO fields: %+v", m)
	}
	cfg := m.S3Config()
	if cfg.Endpoint != m.Endpoint || cfg.AccessKey != m.AccessKey || cfg.SecretKey != m.SecretKey || cfg.Region != m.Region {
		t.Fatalf("S3Config = %+v", cfg)
	}
	ctx := ctxT(t, 60*time.Second)
	m.CreateBucket(t, "chunkup")
	m.CreateBucket(t, "chunkup") // again: fine

	s3c := m.Client(t)
	body := bytes.Repeat([]byte("chunkup!"), 100_000)
	put := func(key string) {
		t.Helper()
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String("chunkup"), Key: aws.String(key), Body: bytes.NewReader(body),
		}); err != nil {
			t.Fatalf("PutObject %s: %v", key, err)
		}
	}
	get := func(key string) {
		t.Helper()
		out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("chunkup"), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("GetObject %s: %v", key, err)
		}
		defer out.Body.Close()
		got, err := io.ReadAll(out.Body)
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("GetObject %s: %d bytes, %v; want the %d bytes put", key, len(got), err, len(body))
		}
	}
	put("a/b")
	get("a/b")

	// Kill and Start: same endpoint, data kept.
	m.Kill()
	if _, err := http.Get(m.Endpoint + "/minio/health/live"); err == nil {
		t.Fatal("MinIO still answers after Kill")
	}
	m.Start(t)
	get("a/b")
	m.Stop()
	m.Stop()
	m.Start(t)
	put("c")
	get("c")
}

func TestProxy(t *testing.T) {
	// An echo server behind the proxy.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	p := testenv.StartProxy(t, ln.Addr().String())

	echo := func(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
		t.Helper()
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return "", err
		}
		c.SetReadDeadline(time.Now().Add(wait))
		return r.ReadString('\n')
	}

	c1, r1 := dialProxy(t, p)
	if got, err := echo(c1, r1, "one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("echo through proxy = %q, %v", got, err)
	}

	p.Pause()
	// An existing connection stalls...
	if got, err := echo(c1, r1, "two", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("paused proxy forwarded: %q, %v", got, err)
	}
	// ...and so does a new one.
	c2, r2 := dialProxy(t, p)
	if got, err := echo(c2, r2, "three", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("paused proxy forwarded a new connection: %q, %v", got, err)
	}

	p.Resume()
	// What was held comes through.
	c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r1.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after Resume, held bytes = %q, %v", got, err)
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := r2.ReadString('\n'); err != nil || got != "three\n" {
		t.Fatalf("after Resume, new connection = %q, %v", got, err)
	}

	// Reset drops current connections; new ones work.
	p.Reset()
	c1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r1.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("after Reset, read = %v, want connection closed", err)
	}
	c3, r3 := dialProxy(t, p)
	if got, err := echo(c3, r3, "four", 5*time.Second); err != nil || got != "four\n" {
		t.Fatalf("echo after Reset = %q, %v", got, err)
	}

	// Close ends everything, and is idempotent.
	p.Close()
	p.Close()
	if _, err := net.DialTimeout("tcp", p.Addr, time.Second); err == nil {
		t.Fatal("closed proxy accepts connections")
	}
}

// TestProxyMinIO makes S3 hang by pausing a proxy in front of MinIO, as the worker fault
// tests do.
func TestProxyMinIO(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "bkt")
	p := testenv.StartProxy(t, m.Addr)
	cfg := m.S3Config()
	cfg.Endpoint = "http://" + p.Addr
	cfg.MaxAttempts = 1
	s3c := s3ClientFor(t, cfg)

	ctx := ctxT(t, 30*time.Second)
	if _, err := s3c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatalf("HeadBucket through proxy: %v", err)
	}
	p.Pause()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := s3c.HeadBucket(short, &s3.HeadBucketInput{Bucket: aws.String("bkt")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("HeadBucket through paused proxy = %v, want deadline exceeded", err)
	}
	p.Resume()
	if _, err := s3c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("bkt")}); err != nil {
		t.Fatalf("HeadBucket after Resume: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestProcess runs a shell as the "binary": output to the log and buffers, Stop, Kill,
// exit codes, and that the whole process group dies.
func TestProcess(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatalf("these tests need a POSIX sh: %v", err)
	}

	t.Run("exit", func(t *testing.T) {
		p := testenv.StartProcess(t, sh, []string{"-c", `echo out "$GREETING"; echo err >&2; exit 3`}, []string{"GREETING=hi"})
		var ee *exec.ExitError
		if err := p.Wait(); !errors.As(err, &ee) || p.ExitCode() != 3 {
			t.Fatalf("Wait = %v, ExitCode = %d; want exit status 3", err, p.ExitCode())
		}
		if p.Stdout() != "out hi\n" || p.Stderr() != "err\n" {
			t.Fatalf("stdout %q stderr %q", p.Stdout(), p.Stderr())
		}
	})

	t.Run("stop", func(t *testing.T) {
		p := testenv.StartProcess(t, sh, []string{"-c", `trap 'echo bye; exit 0' TERM; echo ready; while :; do sleep 0.05; done`}, nil)
		waitOutput(t, p, "ready")
		p.Stop()
		p.Stop()
		if err := p.Wait(); err != nil {
			t.Fatalf("Wait after Stop = %v, want clean exit from the TERM trap", err)
		}
		if !strings.Contains(p.Stdout(), "bye") {
			t.Fatalf("stdout %q: TERM trap did not run", p.Stdout())
		}
	})

	t.Run("kill group", func(t *testing.T) {
		// The shell starts a grandchild that would outlive it; Kill must take both.
		pidFile := filepath.Join(t.TempDir(), "pid")
		p := testenv.StartProcess(t, sh, []string{"-c", `sleep 300 & echo $! > ` + pidFile + `; echo ready; wait`}, nil)
		waitOutput(t, p, "ready")
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatal(err)
		}
		child := atoi(t, strings.TrimSpace(string(b)))
		p.Kill()
		if p.ExitCode() != -1 {
			t.Fatalf("ExitCode after Kill = %d, want -1", p.ExitCode())
		}
		waitGone(t, child)
	})

	var pid int
	t.Run("cleanup", func(t *testing.T) {
		p := testenv.StartProcess(t, sh, []string{"-c", `echo ready; exec sleep 300`}, nil)
		waitOutput(t, p, "ready")
		pid = p.Pid()
		p.Signal(syscall.SIGSTOP) // even a stopped process is cleaned up
	})
	waitGone(t, pid)
}

func waitOutput(t *testing.T, p *testenv.Process, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.Stdout(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never printed %q; stdout %q", p.Name, s, p.Stdout())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestBuildBinary(t *testing.T) {
	dir := t.TempDir()
	// A throwaway main package inside this module's tree would be seen by `go vet ./...`;
	// build one from its own module instead.
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/hello\n\ngo 1.22\n")
	write("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from a built binary\") }\n")
	t.Chdir(dir)

	bin := testenv.BuildBinary(t, "example.com/hello")
	if again := testenv.BuildBinary(t, "example.com/hello"); again != bin {
		t.Fatalf("second BuildBinary built again: %s then %s", bin, again)
	}
	p := testenv.StartProcess(t, bin, nil, nil)
	if err := p.Wait(); err != nil || p.Stdout() != "hello from a built binary\n" {
		t.Fatalf("built binary: %v, stdout %q", err, p.Stdout())
	}
}

func s3ClientFor(t *testing.T, cfg s3client.Config) *s3.Client {
	t.Helper()
	c, err := s3client.New(ctxT(t, 10*time.Second), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	i, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// dialProxy connects to p; the connection closes when the test ends.
func dialProxy(t *testing.T, p *testenv.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// TestS3Servers: each store beside MinIO starts on its own ports with the test
// credentials, creates a bucket (twice: fine), keeps an object and gives it back,
// answers a browser's preflight (the direct uploads' pages put parts into it), and
// StartS3 selects it by CHUNKUP_TEST_S3. `make deps` runs it to build SeaweedFS into the
// cache before the suites.
func TestS3Servers(t *testing.T) {
	for _, tc := range []struct {
		selector, accessKey string
		start               func(testenv.TB) testenv.S3Server
	}{
		{"seaweedfs", testenv.SeaweedFSAccessKey, func(t testenv.TB) testenv.S3Server { return testenv.StartSeaweedFS(t) }},
		{"versitygw", testenv.VersityGWAccessKey, func(t testenv.TB) testenv.S3Server { return testenv.StartVersityGW(t) }},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			s := tc.start(t)
			cfg := s.S3Config()
			if cfg.AccessKey != tc.accessKey || cfg.Region != "us-east-1" {
				t.Fatalf("S3Config = %+v", cfg)
			}
			ctx := ctxT(t, 60*time.Second)
			s.CreateBucket(t, "chunkup")
			s.CreateBucket(t, "chunkup")
			body := bytes.Repeat([]byte("chunkup!"), 100_000)
			if _, err := s.Client(t).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("chunkup"), Key: aws.String("a/b"), Body: bytes.NewReader(body)}); err != nil {
				t.Fatal(err)
			}
			if got := s.Object(t, "chunkup", "a/b"); !bytes.Equal(got, body) {
				t.Fatalf("object: %d bytes, want the %d put", len(got), len(body))
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodOptions, cfg.Endpoint+"/chunkup/a/b?partNumber=1&uploadId=x", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Origin", "http://page.example")
			req.Header.Set("Access-Control-Request-Method", http.MethodPut)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 || resp.Header.Get("Access-Control-Allow-Origin") == "" {
				t.Fatalf("preflight: %s, Access-Control-Allow-Origin %q", resp.Status, resp.Header.Get("Access-Control-Allow-Origin"))
			}
			t.Setenv(testenv.S3Selector, tc.selector)
			if got := testenv.StartS3(t); got.Name() != s.Name() {
				t.Fatalf("StartS3 with %s=%s started %s", testenv.S3Selector, tc.selector, got.Name())
			}
		})
	}
}
