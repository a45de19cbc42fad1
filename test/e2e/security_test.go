package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/server"
)

var jwtSecret = []byte("test-secret-test-secret-test-secret!")

func token(t *testing.T, tenant string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"tenant": tenant, "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString(jwtSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTenantIsolation runs a server with API keys and JWT verification: without
// credentials every chunkup call is UNAUTHENTICATED (health stays open); each tenant's
// objects live under its prefix, whatever the names; another tenant's upload is
// NOT_FOUND for every call, watch and chunks included.
func TestTenantIsolation(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Auth = server.AuthConfig{APIKeys: map[string]string{server.HashAPIKey("acme-key"): "acme"}, JWTSecret: jwtSecret}
	a := e.start(t, cfg)

	anon := e.client(t, a)
	if _, err := anon.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("create without credentials: %v, want UNAUTHENTICATED", err)
	}
	bad := e.client(t, a, client.WithAPIKey("guess"))
	if _, err := bad.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: "abcdefghijklmnopqrstuvwxyz"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("bad API key: %v, want UNAUTHENTICATED", err)
	}
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if r, err := healthpb.NewHealthClient(conn).Check(ctx(t), &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check without credentials: %v %v", r, err)
	}

	acme := e.client(t, a, client.WithAPIKey("acme-key"))
	globex := e.client(t, a, client.WithBearerToken(token(t, "globex")))
	data := randomBytes(3000, 70)
	up, err := acme.Upload(ctx(t), bytes.NewReader(data), client.WithName("../../etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "acme/uploads/" + up.UploadId + "/passwd"; up.Key != want || up.Tenant != "acme" {
		t.Fatalf("key %q tenant %q, want %q in acme", up.Key, up.Tenant, want)
	}
	e.requireExact(t, up, data)
	if _, err := acme.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Key: "../globex/x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("escaping key: %v, want INVALID_ARGUMENT", err)
	}
	mine, err := globex.Upload(ctx(t), strings.NewReader("globex data"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(mine.Key, "globex/") {
		t.Fatalf("globex key %q", mine.Key)
	}

	open, err := acme.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(10)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{up.UploadId, open.Upload.UploadId} {
		for name, call := range map[string]func() error{
			"get": func() error {
				_, err := globex.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: id})
				return err
			},
			"abort": func() error {
				_, err := globex.API().AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: id})
				return err
			},
			"watch": func() error {
				s, err := globex.API().WatchUpload(ctx(t), &chunkupv1.WatchUploadRequest{UploadId: id})
				if err != nil {
					return err
				}
				_, err = s.Recv()
				return err
			},
			"chunk": func() error {
				s, err := globex.API().UploadChunk(ctx(t))
				if err != nil {
					return err
				}
				if err := s.Send(&chunkupv1.UploadChunkRequest{UploadId: id, ChunkNumber: 1, Data: make([]byte, 10)}); err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				_, err = s.Recv()
				return err
			},
		} {
			if err := call(); status.Code(err) != codes.NotFound {
				t.Errorf("globex %s of acme's upload %s: %v, want NOT_FOUND", name, id, err)
			}
		}
	}
	if got := getUpload(t, acme, open.Upload.UploadId); got.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE || len(got.ReceivedChunks) != 0 {
		t.Fatalf("acme's open upload after globex's attempts: %v", got)
	}
}

// TestLimits: each limit answers with its code and a message naming it.
func TestLimits(t *testing.T) {
	e := newEnv(t)
	cfg := e.config("api")
	cfg.Upload.MaxUploadSize = 12 << 20
	cfg.Upload.MaxStreamsPerTenant = 2
	cfg.RatePerTenant, cfg.RateBurst = 1, 40
	a := e.start(t, cfg)
	c := e.client(t, a)

	_, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(13 << 20)})
	expectStatus(t, "declared size over the limit", err, codes.InvalidArgument, "maximum upload size")

	open, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, open.Upload.ChunkSize)
	_ = s.Send(&chunkupv1.UploadChunkRequest{UploadId: open.Upload.UploadId, ChunkNumber: 1, Data: chunk})
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = s.Send(&chunkupv1.UploadChunkRequest{UploadId: open.Upload.UploadId, ChunkNumber: 2, Data: chunk})
	_, err = s.Recv()
	expectStatus(t, "streaming past the limit", err, codes.InvalidArgument, "maximum upload size")

	_, err = c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Metadata: map[string]string{"big": strings.Repeat("x", 9000)}})
	expectStatus(t, "metadata too large", err, codes.InvalidArgument, "metadata has")

	// Request metadata (HTTP/2 headers) is held for a call's life: past
	// server.MaxHeaderListSize the call is refused before it starts.
	mctx := metadata.AppendToOutgoingContext(ctx(t), "x-junk", strings.Repeat("x", 16<<10))
	if _, err := c.API().ListUploads(mctx, &chunkupv1.ListUploadsRequest{}); err != nil {
		t.Fatalf("16 KiB of request metadata: %v", err)
	}
	mctx = metadata.AppendToOutgoingContext(ctx(t), "x-junk", strings.Repeat("x", server.MaxHeaderListSize))
	if _, err := c.API().ListUploads(mctx, &chunkupv1.ListUploadsRequest{}); status.Code(err) == codes.OK {
		t.Fatalf("request metadata over %d bytes was accepted", server.MaxHeaderListSize)
	} else {
		t.Logf("request metadata over the limit: %v", err)
	}

	var streams []chunkupv1.UploadService_UploadChunkClient
	for range 2 {
		st, err := c.API().UploadChunk(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		_ = st.Send(&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{}})
		if _, err := st.Recv(); err != nil { // the stream is open on the server
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	third, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = third.Send(&chunkupv1.UploadChunkRequest{Create: &chunkupv1.CreateUploadRequest{}})
	_, err = third.Recv()
	expectStatus(t, "a third stream", err, codes.ResourceExhausted, "upload streams open on this server")
	for _, st := range streams {
		_ = st.CloseSend()
	}

	var limited error
	for range 100 {
		if _, err := c.API().GetUpload(ctx(t), &chunkupv1.GetUploadRequest{UploadId: open.Upload.UploadId}); err != nil {
			limited = err
			break
		}
	}
	expectStatus(t, "calls over the rate", limited, codes.ResourceExhausted, "over its rate limit")
}

func expectStatus(t *testing.T, what string, err error, code codes.Code, says string) {
	t.Helper()
	if msg := status.Convert(err).Message(); status.Code(err) != code || !strings.Contains(msg, says) || strings.Contains(msg, "--") {
		t.Errorf("%s: %v; want %v saying %q and naming no flag", what, err, code, says)
	}
}

// TestIdleStreamsDoNotLockOutOtherTenants: with the default limits, one tenant opens as
// many upload streams as the receive memory has room for and sends nothing (each
// waiting stream reserves the largest message); another tenant still uploads at once,
// and the first tenant's stream past its share is refused saying so.
func TestIdleStreamsDoNotLockOutOtherTenants(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Auth = server.AuthConfig{APIKeys: map[string]string{server.HashAPIKey("hog-key"): "hog", server.HashAPIKey("fair-key"): "fair"}}
	cfg.Upload.BudgetWait = 2 * time.Second // how long a stream waits for room
	// Room for 7 waiting streams; the default share leaves one to other tenants.
	cfg.Upload.MaxChunkSize, cfg.Server.MaxReceiveMemory = 8*MiB, 64*MiB
	a := e.start(t, cfg)
	hog := e.client(t, a, client.WithAPIKey("hog-key"))
	msg := int64(server.Config{MaxChunkSize: cfg.Upload.MaxChunkSize}.MaxMessageSize())
	share := int((cfg.Server.MaxReceiveMemory - msg) / msg)
	// share+1 streams that send nothing: the server takes them in any order, and the
	// one it takes last waits BudgetWait for room and is refused.
	hogCtx, stop := context.WithCancel(ctx(t))
	defer stop()
	ended := make(chan error, share+1)
	for range share + 1 {
		st, err := hog.API().UploadChunk(hogCtx)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _, err := st.Recv(); ended <- err }()
	}
	select {
	case err := <-ended:
		expectStatus(t, "the hog's stream past its share", err, codes.ResourceExhausted, "this tenant's streams hold its share")
	case <-time.After(time.Minute):
		t.Fatal("no stream of the hog's was refused past its share")
	}

	fair := e.client(t, a, client.WithAPIKey("fair-key"))
	data := randomBytes(100_000, 73)
	began := time.Now()
	up, err := fair.Upload(ctx(t), reader(data))
	if err != nil {
		t.Fatalf("another tenant's upload beside the hog's idle streams: %v", err)
	}
	if took := time.Since(began); took >= cfg.Upload.BudgetWait {
		t.Errorf("another tenant's upload waited %s for receive memory", took)
	}
	e.requireExact(t, up, data)
}

// TestFinishedStreamsGiveBackTheirPlace: a client written from the .proto that creates
// its upload on the stream, reads the acknowledgement of its last chunk and opens its
// next stream at once (without closing the first, or reading its end) is not refused
// under a cap of one stream per tenant: the stream that created the upload moves to
// the tenant's finishing streams before that acknowledgement, once the upload has all
// its parts, and ends with OK. A stream that only carries chunks of an upload made
// elsewhere still ends when the client ends it.
func TestFinishedStreamsGiveBackTheirPlace(t *testing.T) {
	const chunkSize = 5 << 20
	e := newEnv(t)
	cfg := e.config()
	cfg.Upload.ChunkSize, cfg.Upload.MaxStreamsPerTenant = chunkSize, 1
	// The server knows an upload has all its parts when its last part is stored at
	// once, not staged: S3 counts as keeping pace here however loaded the machine.
	cfg.Worker.SlowPart = time.Minute
	a := e.start(t, cfg)
	c := e.client(t, a)

	// upload sends data as one upload created on a new stream, in chunks of chunkSize,
	// and returns the stream once every chunk is acknowledged, with the upload.
	upload := func(t *testing.T, data []byte) (chunkupv1.UploadService_UploadChunkClient, *chunkupv1.Upload) {
		t.Helper()
		st, err := c.API().UploadChunk(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		chunks := (len(data) + chunkSize - 1) / chunkSize
		for n := 1; n <= chunks; n++ {
			req := &chunkupv1.UploadChunkRequest{ChunkNumber: uint32(n), Data: data[(n-1)*chunkSize : min(n*chunkSize, len(data))], IsLast: n == chunks}
			if n == 1 {
				req.Create = &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(int64(len(data)))}
			}
			if err := st.Send(req); err != nil {
				t.Fatalf("send chunk %d: %v", n, err)
			}
		}
		var id string
		var completed *chunkupv1.Upload
		for acked := 0; acked < chunks; {
			r, err := st.Recv()
			if err != nil {
				t.Fatalf("after %d of %d acknowledgements: %v", acked, chunks, err)
			}
			if r.Upload != nil {
				id = r.Upload.UploadId
				continue
			}
			if r.Completed != nil {
				completed = r.Completed
			}
			acked++
		}
		if completed == nil {
			completed = waitCompleted(t, c, id)
		}
		return st, completed
	}

	// Each upload's stream is opened, and its create answered, before the previous
	// stream is read to its end. (The previous stream's handler returns microseconds
	// after its last acknowledgement, so this passes on most runs even without the
	// move to the finishing streams that makes it certain; TestFinishingStreams in
	// upload tests the move itself.)
	var prev chunkupv1.UploadService_UploadChunkClient
	ended := func(what string) {
		t.Helper()
		// The stream ends by itself, with OK, though the client never closed it.
		if _, err := prev.Recv(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the last acknowledgement the stream gave %v, want its end (OK)", what, err)
		}
	}
	for _, size := range []int{1000, chunkSize + 1000, 2 * chunkSize} {
		data := randomBytes(size, uint64(size))
		for round := range 3 {
			st, up := upload(t, data)
			e.requireExact(t, up, data)
			if prev != nil {
				ended(fmt.Sprintf("the stream before the %d-byte upload of round %d", size, round))
			}
			prev = st
		}
	}
	ended("the last stream")

	// A stream carrying chunks of an upload created by CreateUpload is the client's to
	// end: until it does, it holds the tenant's one place.
	st := holdStream(t, c)
	other, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	_ = other.CloseSend()
	_, err = other.Recv()
	expectStatus(t, "a second stream while the first is open", err, codes.ResourceExhausted, "stream")
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the stream the client closed ended with %v", err)
	}
}

// TestHTTPCreationAtTheStreamCap: a tus creation that carries data (creation-with-upload)
// from a tenant at its cap of streams is refused before its upload exists, so that a
// tus client, which retries a failed creation by creating again, leaves no upload
// behind; a creation without data needs no stream and is taken. Once the stream ends,
// the same creation with data succeeds.
func TestHTTPCreationAtTheStreamCap(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Upload.MaxStreamsPerTenant = 1
	a := e.start(t, cfg)
	c := e.client(t, a)
	d := doorOf(t, a.HTTPAddr())

	// The tenant's one stream: a chunk of an upload made by CreateUpload, on a stream
	// the client keeps open.
	st := holdStream(t, c)
	inProgress := func() int {
		t.Helper()
		res, err := c.API().ListUploads(ctx(t), &chunkupv1.ListUploadsRequest{PageSize: 500})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Uploads)
	}
	before := inProgress()

	data := randomBytes(3<<20, 7)
	withData := func() reply {
		return d.do("POST", "/files/", bytes.NewReader(data), "Tus-Resumable", "1.0.0",
			"Upload-Length", fmt.Sprint(len(data)), "Content-Type", tusCT)
	}
	for try := range 3 { // as a tus client retrying its creation
		r := withData()
		expectHTTP(t, r, http.StatusServiceUnavailable)
		if loc := r.Header.Get("Location"); loc != "" || !strings.Contains(string(r.body), "no upload was created") {
			t.Fatalf("try %d: a creation refused at the stream cap answered Location %q, %q; want no Location and a message saying nothing was created", try, loc, r.body)
		}
	}
	if got := inProgress(); got != before {
		t.Fatalf("%d uploads in progress after the refused creations, want %d", got, before)
	}
	// Without data the creation takes no stream.
	expectHTTP(t, d.do("POST", "/files/", nil, "Tus-Resumable", "1.0.0", "Upload-Length", "5"), http.StatusCreated)

	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("the stream the client closed ended with %v", err)
	}
	// The stream's place comes back when its handler returns, just after its end.
	var r reply
	for deadline := time.Now().Add(10 * time.Second); ; {
		if r = withData(); r.StatusCode != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	expectHTTP(t, r, http.StatusCreated)
	if off := headerInt(t, r.Header, "Upload-Offset"); off != int64(len(data)) {
		t.Fatalf("the creation took %d of %d bytes", off, len(data))
	}
	e.requireExact(t, waitCompleted(t, c, idOf(r.Header.Get("Location"))), data)
}

// TestDefaultBudgetFromMaxmemory: on a Redis with maxmemory (64 MiB here) and no
// --staged-bytes-budget, staged chunks push back on their stream at half of it, before
// Redis would refuse writes: the stream that stages more than that is refused with
// RESOURCE_EXHAUSTED naming the budget, and another upload is still created. (With no
// worker in the process, nothing drains what is staged.) Without the default, Redis
// fills up and every request that writes to it fails, the other upload's create too.
func TestDefaultBudgetFromMaxmemory(t *testing.T) {
	e := newEnv(t)
	setMaxmemory := func(v string) {
		t.Helper()
		set := func(ctx context.Context, c redis.Cmdable) error { return c.ConfigSet(ctx, "maxmemory", v).Err() }
		var err error
		if cc, ok := e.rdb(t).(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx(t), func(ctx context.Context, node *redis.Client) error { return set(ctx, node) })
		} else {
			err = set(ctx(t), e.rdb(t))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	setMaxmemory("64mb")
	t.Cleanup(func() { setMaxmemory("0") }) // a cluster is shared by the tests
	cfg := e.config(app.RoleAPI)
	cfg.Upload.BudgetWait = 2 * time.Second
	a := e.start(t, cfg)
	c := e.client(t, a)

	st, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	const chunk, chunks = 8 << 20, 8
	go func() {
		for n := 1; n <= chunks; n++ {
			req := &chunkupv1.UploadChunkRequest{ChunkNumber: uint32(n), Data: randomBytes(chunk, uint64(n))}
			if n == 1 {
				req.Create = &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(chunk * chunks), ChunkSize: chunk}
			}
			if st.Send(req) != nil {
				return
			}
		}
	}()
	acked := 0
	for {
		r, err := st.Recv()
		if err != nil {
			expectStatus(t, "a stream staging past the budget", err, codes.ResourceExhausted, "budget")
			break
		}
		if r.Upload == nil {
			acked++
		}
	}
	if acked == 0 || acked >= chunks {
		t.Fatalf("%d of %d chunks acknowledged before the refusal, want some but not all", acked, chunks)
	}
	if _, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(10)}); err != nil {
		t.Fatalf("another upload's create with Redis holding the staged chunks: %v", err)
	}
}

// holdStream opens a stream that holds one of the tenant's places until the client
// closes it: it carries the one chunk of an upload made by CreateUpload, acknowledged.
func holdStream(t *testing.T, c *client.Client) chunkupv1.UploadService_UploadChunkClient {
	t.Helper()
	cr, err := c.API().CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{ExpectedSize: proto.Int64(10)})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.API().UploadChunk(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&chunkupv1.UploadChunkRequest{UploadId: cr.Upload.UploadId, ChunkNumber: 1, Data: []byte("0123456789"), IsLast: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	return st
}
