package testenv

import (
	_ "embed"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/chunkup/chunkup/internal/s3client"
)

// Versity's S3 gateway (versitygw) over a POSIX directory is the suite's third store:
// another S3 implementation, written apart from MinIO and SeaweedFS, that users put in
// front of file systems (docs/s3-stores.md). It runs the smallest subset: the S3
// operations chunkup needs, and uploads by each door end to end.
var VersityGWVersion = strings.TrimSpace(versityGWVersionFile)

//go:embed versitygw.version
var versityGWVersionFile string

const (
	versityGWModule = "github.com/versity/versitygw"
	versityGWPkg    = versityGWModule + "/cmd/versitygw"
)

// VersityGWBinary returns the path of versitygw, built into the cache at
// VersityGWVersion when it is not there (see goInstalled).
func VersityGWBinary() (string, error) {
	return goInstalled("versitygw", versityGWModule, versityGWPkg, VersityGWVersion)
}

// The fixed root credentials of every versitygw that StartVersityGW starts.
const (
	VersityGWAccessKey = "chunkup-test"
	VersityGWSecretKey = "chunkup-test-secret"
)

// VersityGW is a versitygw server with its POSIX backend, started by StartVersityGW.
type VersityGW struct {
	// Endpoint is its base URL.
	Endpoint string
	// Dir holds its buckets; LogFile its output.
	Dir, LogFile string

	bin  string
	args []string
	daemon
}

// StartVersityGW starts versitygw on a free 127.0.0.1 port over a directory of its own,
// with the fixed test credentials and CORS open to every origin (for pages that put
// parts straight into it), and waits until it answers. It is stopped when the test ends.
func StartVersityGW(t TB) *VersityGW {
	t.Helper()
	bin, err := VersityGWBinary()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	base := t.TempDir()
	g := &VersityGW{bin: bin, Dir: filepath.Join(base, "data"), LogFile: filepath.Join(base, "versitygw.log")}
	if err := os.MkdirAll(g.Dir, 0o755); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
	g.Endpoint = "http://" + addr
	g.args = []string{"--port", addr, "--cors-allow-origin", "*", "posix", g.Dir}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: versitygw %s log (last lines):\n%s", g.Endpoint, tailFile(g.LogFile, 40))
		}
		g.Stop()
	})
	if err := g.launch(g.run); err != nil {
		t.Fatalf("testenv: versitygw on %s: %v\nlog:\n%s", g.Endpoint, err, tailFile(g.LogFile, 40))
	}
	return g
}

func (g *VersityGW) run() (*proc, error) {
	env := append(os.Environ(), "ROOT_ACCESS_KEY="+VersityGWAccessKey, "ROOT_SECRET_KEY="+VersityGWSecretKey)
	p, _, err := startS3Proc(g.bin, g.args, env, g.LogFile, g.S3Config())
	return p, err
}

// S3Config is the S3 configuration for this server.
func (g *VersityGW) S3Config() s3client.Config {
	return s3client.Config{Endpoint: g.Endpoint, Region: "us-east-1", AccessKey: VersityGWAccessKey, SecretKey: VersityGWSecretKey}
}

// Client returns an S3 client for this server, built by s3client.New like chunkup's own.
func (g *VersityGW) Client(t TB) *s3.Client { return clientOf(t, g.S3Config()) }

// CreateBucket creates a bucket; one that already exists is fine.
func (g *VersityGW) CreateBucket(t TB, name string) { createBucket(t, g.Client(t), name) }

// Object reads object bucket/key back, failing the test if it cannot.
func (g *VersityGW) Object(t TB, bucket, key string) []byte {
	return objectOf(t, g.Client(t), bucket, key)
}

// Name implements S3Server.
func (g *VersityGW) Name() string { return "versitygw" }

var _ S3Server = (*VersityGW)(nil)
