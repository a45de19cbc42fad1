// Package adversarial holds the probes of a hostile tenant against a real `chunkup
// serve` process (its own process, real Redis and MinIO), each asserting what the other
// tenant cares about: its upload is taken at once and is exact, the server's file
// descriptors come back, a refusal changes nothing. Run by `make test`.
package adversarial

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/test/harness"
)

const bucket = "adversarial"

// The two tenants' API keys.
const (
	keyA = "hostile-tenant-key-aaaaaaaaaaaaaaaaaaaaaaa"
	keyB = "honest-tenant-key-bbbbbbbbbbbbbbbbbbbbbbbbb"
)

type env struct {
	t     *testing.T
	minio *testenv.MinIO
	node  *harness.Node
}

// serve starts `chunkup serve` with tenants a and b (API keys keyA and keyB), or
// without authentication when open, and the extra flags.
func serve(t *testing.T, open bool, extra ...string) *env {
	t.Helper()
	r := testenv.StartRedis(t)
	m := testenv.StartMinIO(t)
	flags := []string{"--log-level", "warn"}
	if !open {
		flags = append(flags, "--api-keys", "a:"+server.HashAPIKey(keyA)+",b:"+server.HashAPIKey(keyB))
	}
	node := harness.StartNode(t, harness.NodeConfig{Name: "serve", Roles: "api,worker,completer,cleanup",
		RedisURL: r.URL(), MinIO: m, Bucket: bucket, Flags: append(flags, extra...)})
	return &env{t: t, minio: m, node: node}
}

func ctxFor(t *testing.T, d time.Duration) context.Context { return harness.Ctx(t, d) }

// do sends an HTTP request to the node's door and returns the response with its body.
func (e *env) do(ctx context.Context, method, path string, body []byte, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+e.node.HTTPAddr+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

// tusCreate creates a tus upload of length bytes as key's tenant and returns its path.
func (e *env) tusCreate(ctx context.Context, key string, length int64) (string, *http.Response) {
	e.t.Helper()
	res, body := e.do(ctx, "POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", strconv.FormatInt(length, 10), "X-Api-Key", key)
	if res.StatusCode != http.StatusCreated {
		return "", res
	}
	loc := res.Header.Get("Location")
	if !strings.HasPrefix(loc, "/files/") {
		e.t.Fatalf("Location %q (%s)", loc, body)
	}
	return loc, res
}

// tusUpload uploads data in one PATCH as key's tenant and checks the object is exact.
func (e *env) tusUpload(ctx context.Context, key string, data []byte) {
	e.t.Helper()
	loc, res := e.tusCreate(ctx, key, int64(len(data)))
	if loc == "" {
		e.t.Fatalf("create: %d", res.StatusCode)
	}
	res, body := e.do(ctx, "PATCH", loc, data, "Tus-Resumable", "1.0.0", "Content-Type", "application/offset+octet-stream", "Upload-Offset", "0", "X-Api-Key", key)
	if res.StatusCode != http.StatusNoContent {
		e.t.Fatalf("tenant's PATCH: %d %s", res.StatusCode, body)
	}
	e.requireObject(ctx, key, strings.TrimPrefix(loc, "/files/"), data)
}

// requireObject waits until upload id of key's tenant completed and checks its object.
func (e *env) requireObject(ctx context.Context, key, id string, data []byte) {
	e.t.Helper()
	c := harness.Dial(e.t, e.node.GRPCAddr, client.WithAPIKey(key))
	var up *chunkupv1.Upload
	harness.Poll(e.t, "the upload to complete", time.Minute, func() error {
		r, err := c.API().GetUpload(ctx, &chunkupv1.GetUploadRequest{UploadId: id})
		if err != nil {
			return err
		}
		if up = r.Upload; up.State != chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
			return fmt.Errorf("state %s", up.State)
		}
		return nil
	})
	harness.RequireExact(e.t, ctx, e.minio.Client(e.t), bucket, up, data)
}

// trickle opens a PATCH announcing length bytes and sends one byte every interval
// until ctx ends; the connection is closed then.
func (e *env) trickle(ctx context.Context, loc, key string, length int64, interval time.Duration) error {
	conn, err := net.Dial("tcp", e.node.HTTPAddr)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	if _, err := fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: %s\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nX-Api-Key: %s\r\nContent-Length: %d\r\n\r\n", loc, e.node.HTTPAddr, key, length); err != nil {
		return err
	}
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := conn.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	return nil
}

// Tenant a holds eight PATCHes on uploads of 64 MiB chunks, trickling a byte every two
// seconds; tenant b's 10 MB upload, started 4 s later, is taken at once and is exact.
func TestTricklingPatchesDoNotLockOutAnotherTenant(t *testing.T) {
	e := serve(t, false)
	ctx := ctxFor(t, 3*time.Minute)
	hostile, stop := context.WithCancel(ctx)
	defer stop()
	for range 8 {
		loc, res := e.tusCreate(ctx, keyA, 671088640000)
		if loc == "" {
			t.Fatalf("tenant a's create: %d", res.StatusCode)
		}
		if err := e.trickle(hostile, loc, keyA, 100000000, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(4 * time.Second) // the scenario: b arrives while a has trickled for a while
	start := time.Now()
	e.tusUpload(ctx, keyB, harness.RandomBytes(10_000_000, 1))
	t.Logf("tenant b's 10 MB upload took %s while tenant a trickled", time.Since(start))
}

// Tenant a holds 64 upload streams that send nothing; tenant b's upload goes through,
// exact.
func TestSilentStreamsDoNotLockOutAnotherTenant(t *testing.T) {
	e := serve(t, false)
	ctx := ctxFor(t, 3*time.Minute)
	conn, err := grpc.NewClient(e.node.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	actx := metadata.AppendToOutgoingContext(ctx, "x-api-key", keyA)
	api := chunkupv1.NewUploadServiceClient(conn)
	for i := range 64 {
		if _, err := api.UploadChunk(actx); err != nil {
			t.Fatalf("tenant a's stream %d: %v", i, err)
		}
	}
	c := harness.Dial(t, e.node.GRPCAddr, client.WithAPIKey(keyB))
	data := harness.RandomBytes(20<<20+5, 2)
	up, err := c.Upload(ctx, bytes.NewReader(data), client.WithSize(int64(len(data))))
	if err != nil {
		t.Fatalf("tenant b's upload beside a's silent streams: %v", err)
	}
	harness.RequireExact(t, ctx, e.minio.Client(t), bucket, up, data)
}

// A body slower than --http-min-body-rate is ended with 408 and keeps every byte it
// delivered; its client resumes from HEAD's offset.
func TestTrickleEndedWith408(t *testing.T) {
	e := serve(t, false, "--http-min-body-rate-window", "3s")
	ctx := ctxFor(t, 2*time.Minute)
	loc, _ := e.tusCreate(ctx, keyA, 1000)
	conn, err := net.Dial("tcp", e.node.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: x\r\nTus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nX-Api-Key: %s\r\nContent-Length: 1000\r\n\r\nx", loc, keyA)
	start := time.Now()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "bytes per second") {
		t.Fatalf("a trickling PATCH got %d %s, want 408 saying why", res.StatusCode, body)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("ended after %s", took)
	}
	// The one byte it delivered is kept: the client resumes after it.
	res, _ = e.do(ctx, "HEAD", loc, nil, "Tus-Resumable", "1.0.0", "X-Api-Key", keyA)
	if res.Header.Get("Upload-Offset") != "1" {
		t.Fatalf("offset %q after the 408, want 1 (the byte it sent)", res.Header.Get("Upload-Offset"))
	}
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// 500 idle keep-alive connections are closed within --http-idle-timeout, and give
// their file descriptors back; past --http-max-conns-per-ip a client's connection is
// closed at once.
func TestIdleConnectionsClosed(t *testing.T) {
	e := serve(t, true, "--http-idle-timeout", "2s", "--http-max-conns-per-ip", "600")
	ctx := ctxFor(t, 2*time.Minute)
	pid := e.node.Proc.Pid()
	base := openFDs(t, pid)
	conns := make([]net.Conn, 500)
	for i := range conns {
		c, err := net.Dial("tcp", e.node.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %v", i, err)
		}
		res.Body.Close()
		conns[i] = c
	}
	// (The process may close a descriptor or two of its own meanwhile.)
	if n := openFDs(t, pid); n < base+490 {
		t.Fatalf("%d descriptors with 500 connections open, %d before", n, base)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err := c.Read(make([]byte, 1))
			if err != io.EOF {
				t.Errorf("an idle connection: %v, want closed by the server", err)
			}
		})
	}
	wg.Wait()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("idle connections closed after %s (idle timeout 2s)", took)
	}
	harness.Poll(t, "the descriptors to come back", 10*time.Second, func() error {
		if n := openFDs(t, pid); n > base+5 {
			return fmt.Errorf("%d open, %d before", n, base)
		}
		return nil
	})
	_ = ctx
}

// Past --http-max-conns-per-ip, a client's next connection is closed at once; another
// goes through once one is closed.
func TestConnectionsPerAddress(t *testing.T) {
	const limit = 20
	e := serve(t, true, "--http-max-conns-per-ip", strconv.Itoa(limit))
	// served tells whether a new connection from this address is served a request.
	served := func() (net.Conn, bool) {
		c, err := net.Dial("tcp", e.node.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return c, false
		}
		res.Body.Close()
		return c, res.StatusCode == http.StatusOK
	}
	// Connections are served until the address holds its limit (the harness's
	// readiness probe may hold one of them, idle), then closed at once.
	var held []net.Conn
	for len(held) <= limit {
		c, ok := served()
		if !ok {
			break
		}
		held = append(held, c)
	}
	if len(held) > limit || len(held) < limit-2 {
		t.Fatalf("%d connections from one address were served; the limit is %d", len(held), limit)
	}
	if _, ok := served(); ok {
		t.Fatal("a connection past the limit was served")
	}
	held[0].Close()
	harness.Poll(t, "a connection after one closed", 10*time.Second, func() error {
		res, err := http.Get("http://" + e.node.HTTPAddr + "/healthz")
		if err != nil {
			return err
		}
		res.Body.Close()
		return nil
	})
}

// One tenant creating uploads without end is refused past its cap with 429 and
// Retry-After (RESOURCE_EXHAUSTED over gRPC), whichever door; the refused creates
// leave nothing; another tenant creates meanwhile.
func TestActiveUploadsCapped(t *testing.T) {
	const limit = 150
	e := serve(t, false, "--max-active-uploads-per-tenant", strconv.Itoa(limit), "--create-rate-per-tenant", "-1")
	ctx := ctxFor(t, 3*time.Minute)
	created := 0
	for {
		loc, res := e.tusCreate(ctx, keyA, 1000)
		if loc == "" {
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
				t.Fatalf("past the cap: %d (Retry-After %q), want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
			}
			break
		}
		if created++; created > limit {
			t.Fatalf("tenant a created %d uploads, past its cap of %d", created, limit)
		}
	}
	if created != limit {
		t.Fatalf("tenant a created %d uploads before its first refusal, want %d", created, limit)
	}
	a := harness.Dial(t, e.node.GRPCAddr, client.WithAPIKey(keyA))
	_, err := a.API().CreateUpload(ctx, &chunkupv1.CreateUploadRequest{Name: "one-more"})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "as many uploads in progress as it may have") {
		t.Fatalf("gRPC create past the cap: %v, want RESOURCE_EXHAUSTED saying so", err)
	}
	// The refusals created nothing.
	list, err := a.API().ListUploads(ctx, &chunkupv1.ListUploadsRequest{PageSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Uploads) != limit {
		t.Fatalf("tenant a has %d uploads in progress, want %d", len(list.Uploads), limit)
	}
	// The other tenant is not held back.
	e.tusUpload(ctx, keyB, harness.RandomBytes(100_000, 3))
}

// Creations faster than --create-rate-per-tenant are refused with 429 and Retry-After.
func TestCreateRateLimited(t *testing.T) {
	e := serve(t, false, "--create-rate-per-tenant", "20")
	ctx := ctxFor(t, 2*time.Minute)
	refused := 0
	for range 100 {
		if loc, res := e.tusCreate(ctx, keyA, 10); loc == "" {
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
				t.Fatalf("a refused create: %d, want 429 with Retry-After", res.StatusCode)
			}
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("100 creates in a burst were all taken at 20 per second (burst 40)")
	}
	if loc, _ := e.tusCreate(ctx, keyB, 10); loc == "" {
		t.Fatal("the other tenant's create was refused")
	}
}

// A page of an attacker's domain that resolves to the server (DNS rebinding) cannot
// upload to an unauthenticated server: 403, and nothing is created.
func TestDNSRebindingRefused(t *testing.T) {
	e := serve(t, true)
	ctx := ctxFor(t, time.Minute)
	host := "rebind.attacker.example:" + e.node.HTTPAddr[strings.LastIndex(e.node.HTTPAddr, ":")+1:]
	res, body := e.do(ctx, "POST", "/files/", nil, "Origin", "http://"+host, "Host", host, "Tus-Resumable", "1.0.0", "Upload-Length", "5")
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("a rebinding page's create: %d %s, want 403", res.StatusCode, body)
	}
	c := harness.Dial(t, e.node.GRPCAddr)
	list, err := c.API().ListUploads(ctx, &chunkupv1.ListUploadsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Uploads) != 0 {
		t.Fatalf("the refused request created %d uploads", len(list.Uploads))
	}
	// The page of the server's own address still works.
	self := "http://" + e.node.HTTPAddr
	if res, body := e.do(ctx, "POST", "/files/", nil, "Origin", self, "Tus-Resumable", "1.0.0", "Upload-Length", "5"); res.StatusCode != http.StatusCreated {
		t.Fatalf("the server's own page: %d %s", res.StatusCode, body)
	}
}

// 300 connections each sending a large header that never ends hold at most
// --http-max-header-bytes each (64 KiB): the server's peak RSS grows by little, and
// each such connection is closed (431, or when its 5 s to send a header run out).
func TestUnfinishedHeadersBounded(t *testing.T) {
	e := serve(t, true, "--http-max-conns-per-ip", "1000")
	pid := e.node.Proc.Pid()
	harness.ResetPeakRSS(t, pid)
	base := harness.PeakRSS(t, pid)
	filler := "X-Filler: " + strings.Repeat("a", 1<<20) // 1 MiB of header, no end
	var wg sync.WaitGroup
	for range 300 {
		c, err := net.Dial("tcp", e.node.HTTPAddr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		wg.Go(func() {
			_, _ = fmt.Fprintf(c, "POST /files/ HTTP/1.1\r\nHost: x\r\n%s", filler) // fails once the server closes
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, _ = io.Copy(io.Discard, c) // until the server closes it
		})
	}
	wg.Wait()
	grown := harness.PeakRSS(t, pid) - base
	t.Logf("peak RSS grew by %d MiB for 300 unfinished 1 MiB headers", grown>>20)
	if grown > 100<<20 {
		t.Fatalf("peak RSS grew by %d MiB (bound: 300 × 64 KiB and buffers, well under 100 MiB)", grown>>20)
	}
}
