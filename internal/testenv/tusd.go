package testenv

import (
	_ "embed"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// TusdVersion is the tusd release the bench runs beside chunkup as a peer (the
// reference tus server, with its S3 store), as `go install` spells it. It is pinned in
// one place, the file tusd.version beside this one, which the Makefile reads too.
var TusdVersion = strings.TrimSpace(tusdVersionFile)

//go:embed tusd.version
var tusdVersionFile string

const (
	tusdModule = "github.com/tus/tusd/v2"
	tusdPkg    = tusdModule + "/cmd/tusd"
)

// TusdBinary returns the path of tusd, built into the cache at TusdVersion when it is
// not there (see goInstalled).
func TusdBinary() (string, error) {
	return goInstalled("tusd", tusdModule, tusdPkg, TusdVersion)
}

// Tusd is a tusd server started by StartTusd.
type Tusd struct {
	// URL is its tus endpoint, http://127.0.0.1:PORT/files/.
	URL string
	*Process
}

// StartTusd starts tusd on a free 127.0.0.1 port, storing uploads in bucket of store
// with its S3 store (objects under their upload ids; content hashes off, as chunkup
// sends none either: both rely on the transport's), and waits until it answers. It is
// stopped when the test ends.
func StartTusd(t TB, store S3Server, bucket string) *Tusd {
	t.Helper()
	bin, err := TusdBinary()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	cfg := store.S3Config()
	port := FreePort(t)
	p := StartProcess(t, bin, []string{"-host", "127.0.0.1", "-port", fmt.Sprint(port), "-s3-bucket", bucket,
		"-s3-endpoint", cfg.Endpoint, "-s3-disable-content-hashes", "-disable-download", "-verbose=false"},
		[]string{"AWS_ACCESS_KEY_ID=" + cfg.AccessKey, "AWS_SECRET_ACCESS_KEY=" + cfg.SecretKey, "AWS_REGION=" + cfg.Region})
	td := &Tusd{URL: fmt.Sprintf("http://127.0.0.1:%d/files/", port), Process: p}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(td.URL)
		if err == nil {
			resp.Body.Close()
			return td
		}
		select {
		case <-p.Done():
			t.Fatalf("testenv: tusd exited: %s", p.Stderr())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: tusd did not answer within a minute: %v\n%s", err, p.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
