package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/internal/s3client"
)

// SeaweedFS, a maintained Go S3 server, is the suite's second store beside MinIO
// (docs/s3-stores.md). Its module cannot be `go install`ed (its go.mod has replace
// directives), so SeaweedFSBinary builds `./weed` inside a copy of the module.
const (
	seaweedModule = "github.com/seaweedfs/seaweedfs"
	// SeaweedFSVersion is the pinned version, as the Go module proxy names it.
	SeaweedFSVersion = "v0.0.0-20261109003541-7506e5f91cd6"
)

// SeaweedFSBinary returns the path of the weed binary: $CHUNKUP_SEAWEEDFS if set, else
// CacheDir()/bin/weed-SeaweedFSVersion, built when missing (several minutes: `go mod
// download` of the module, a copy of it, `go build ./weed` there) under a file lock.
func SeaweedFSBinary() (string, error) {
	if p := os.Getenv("CHUNKUP_SEAWEEDFS"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("CHUNKUP_SEAWEEDFS=%s: %w", p, err)
		}
		return p, nil
	}
	bin := filepath.Join(BinDir(), "weed-"+SeaweedFSVersion)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	err := withFileLock(filepath.Join(CacheDir(), "seaweedfs.lock"), func() error {
		if _, err := os.Stat(bin); err == nil { // another process built it
			return nil
		}
		dl := exec.Command(goCommand(), "mod", "download", "-json", seaweedModule+"@"+SeaweedFSVersion)
		dl.Dir = CacheDir()
		dl.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		out, err := dl.Output()
		if err != nil {
			return fmt.Errorf("go mod download %s@%s: %v", seaweedModule, SeaweedFSVersion, err)
		}
		var mod struct{ Dir, Error string }
		if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
			return fmt.Errorf("go mod download %s@%s: %s %v", seaweedModule, SeaweedFSVersion, mod.Error, err)
		}
		src, err := os.MkdirTemp(CacheDir(), "seaweedfs-src-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(src)
		// The module cache is read-only, and a build there would want to write go.sum.
		if out, err := exec.Command("cp", "-r", mod.Dir+"/.", src).CombinedOutput(); err != nil {
			return fmt.Errorf("copy %s: %v\n%s", mod.Dir, err, out)
		}
		if out, err := exec.Command("chmod", "-R", "u+w", src).CombinedOutput(); err != nil {
			return fmt.Errorf("chmod %s: %v\n%s", src, err, out)
		}
		if err := os.MkdirAll(BinDir(), 0o755); err != nil {
			return err
		}
		tmp := bin + ".tmp"
		build := exec.Command(goCommand(), "build", "-o", tmp, "./weed")
		build.Dir = src
		build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./weed of %s@%s: %v\n%s", seaweedModule, SeaweedFSVersion, err, out)
		}
		return os.Rename(tmp, bin)
	})
	if err != nil {
		return "", fmt.Errorf("seaweedfs: %w", err)
	}
	return bin, nil
}

// The fixed credentials of every SeaweedFS that StartSeaweedFS starts.
const (
	SeaweedFSAccessKey = "chunkup-test"
	SeaweedFSSecretKey = "chunkup-test-secret"
)

// SeaweedFS is a SeaweedFS server (`weed mini`: master, volume, filer and S3 gateway in
// one process) started by StartSeaweedFS.
type SeaweedFS struct {
	// Endpoint is the S3 gateway's base URL.
	Endpoint string
	// Dir holds its data; LogFile its output.
	Dir, LogFile string

	bin  string
	args []string
	daemon
}

// StartSeaweedFS starts SeaweedFS on free 127.0.0.1 ports with its own data directory
// and the fixed test credentials, and waits until its S3 gateway answers. It is stopped
// when the test ends.
func StartSeaweedFS(t TB) *SeaweedFS {
	t.Helper()
	bin, err := SeaweedFSBinary()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	base := t.TempDir()
	s := &SeaweedFS{bin: bin}
	conf := filepath.Join(base, "s3.json")
	identities := `{"identities":[{"name":"chunkup","credentials":[{"accessKey":"` + SeaweedFSAccessKey +
		`","secretKey":"` + SeaweedFSSecretKey + `"}],"actions":["Admin","Read","Write","List","Tagging"]}]}`
	if err := os.WriteFile(conf, []byte(identities), 0o600); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: seaweedfs %s log (last lines):\n%s", s.Endpoint, tailFile(s.LogFile, 40))
		}
		s.Stop()
	})
	port := func() string { return strconv.Itoa(FreePort(t)) }
	// Its nine ports are free when chosen, but its servers bind them one after another
	// over a second or two, and another process may take one meanwhile: SeaweedFS then
	// exits ("address already in use"), and is started again on other ports, in a
	// directory and log of its own.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		run := filepath.Join(base, strconv.Itoa(attempt))
		s.Dir, s.LogFile = filepath.Join(run, "data"), filepath.Join(run, "weed.log")
		if err := os.MkdirAll(s.Dir, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		s3Port := port()
		s.Endpoint = "http://" + net.JoinHostPort("127.0.0.1", s3Port)
		s.args = []string{"mini", "-dir=" + s.Dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
			"-master.port=" + port(), "-master.port.grpc=" + port(), "-master.telemetry=false",
			"-volume.port=" + port(), "-volume.port.grpc=" + port(),
			"-filer.port=" + port(), "-filer.port.grpc=" + port(), "-filer.localSocket=" + filepath.Join(run, "filer.sock"),
			"-s3.port=" + s3Port, "-s3.port.grpc=" + port(), "-s3.port.iceberg=0", "-s3.port.lance=0",
			"-s3.config=" + conf, "-webdav=false", "-admin.ui=false"}
		err := s.launch(s.run)
		if err == nil {
			return s
		}
		log := tailFile(s.LogFile, 40)
		if attempt < attempts && strings.Contains(log, "address already in use") {
			t.Logf("testenv: seaweedfs: a port was taken while it started (attempt %d of %d); starting it on other ports", attempt, attempts)
			continue
		}
		t.Fatalf("testenv: seaweedfs on %s: %v\nlog:\n%s", s.Endpoint, err, log)
	}
}

func (s *SeaweedFS) run() (*proc, error) {
	p, c, err := startS3Proc(s.bin, s.args, os.Environ(), s.LogFile, s.S3Config())
	if err != nil {
		return nil, err
	}
	// SeaweedFS grows its volumes on the first write, which makes that write take a
	// second or more: written here, so that a test's first upload is timed like any
	// other.
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	if _, err := c.CreateBucket(wctx, &s3.CreateBucketInput{Bucket: aws.String("testenv-warm-up")}); err == nil {
		_, _ = c.PutObject(wctx, &s3.PutObjectInput{Bucket: aws.String("testenv-warm-up"), Key: aws.String("warm-up"), Body: strings.NewReader("warm-up")})
	}
	return p, nil
}

// startS3Proc starts an S3 server, bin with args and env, its output appended to
// logFile, and waits until it lists buckets with cfg's credentials (the gateway and
// whatever stands behind it are up). It returns the client that asked.
func startS3Proc(bin string, args, env []string, logFile string, cfg s3client.Config) (*proc, *s3.Client, error) {
	log, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer log.Close()
	p, err := startProc(bin, args, env, log, log)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := s3client.New(ctx, cfg)
	if err != nil {
		p.kill()
		return nil, nil, err
	}
	err = waitFor(startTimeout, p.done, func() error {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		defer ccancel()
		_, err := c.ListBuckets(cctx, &s3.ListBucketsInput{})
		return err
	})
	if err != nil {
		p.kill()
		return nil, nil, err
	}
	return p, c, nil
}

// S3Config is the S3 configuration for this server.
func (s *SeaweedFS) S3Config() s3client.Config {
	return s3client.Config{Endpoint: s.Endpoint, Region: "us-east-1", AccessKey: SeaweedFSAccessKey, SecretKey: SeaweedFSSecretKey}
}

// Client returns an S3 client for this server, built by s3client.New like chunkup's own.
func (s *SeaweedFS) Client(t TB) *s3.Client { return clientOf(t, s.S3Config()) }

// CreateBucket creates a bucket; one that already exists is fine.
func (s *SeaweedFS) CreateBucket(t TB, name string) { createBucket(t, s.Client(t), name) }

// Object reads object bucket/key back, failing the test if it cannot.
func (s *SeaweedFS) Object(t TB, bucket, key string) []byte {
	return objectOf(t, s.Client(t), bucket, key)
}

// S3Server is an S3 store the suites run against: MinIO, SeaweedFS or versitygw.
type S3Server interface {
	S3Config() s3client.Config
	Client(t TB) *s3.Client
	CreateBucket(t TB, name string)
	Object(t TB, bucket, key string) []byte
	// Name is the store's, for reports ("MinIO", "SeaweedFS", "versitygw").
	Name() string
	// Pid is the server process's (for its CPU time); Pause and Resume stop and
	// continue it (SIGSTOP, SIGCONT): an S3 that stops answering.
	Pid() int
	Pause() error
	Resume() error
}

// Name implements S3Server.
func (m *MinIO) Name() string { return "MinIO" }

// Name implements S3Server.
func (s *SeaweedFS) Name() string { return "SeaweedFS" }

var (
	_ S3Server = (*MinIO)(nil)
	_ S3Server = (*SeaweedFS)(nil)
)

// S3Selector is the environment variable that chooses the store of StartS3.
const S3Selector = "CHUNKUP_TEST_S3"

// StartS3 starts the store CHUNKUP_TEST_S3 names: minio (the default), seaweedfs or
// versitygw.
func StartS3(t TB) S3Server {
	t.Helper()
	switch v := os.Getenv(S3Selector); v {
	case "", "minio":
		return StartMinIO(t)
	case "seaweedfs":
		return StartSeaweedFS(t)
	case "versitygw":
		return StartVersityGW(t)
	default:
		t.Fatalf("testenv: %s=%q: use minio, seaweedfs or versitygw", S3Selector, v)
		return nil
	}
}
