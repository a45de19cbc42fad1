// Package doors checks what every door of chunkup promises alike: each kind of error
// the upload core and the stores below it return reaches a gRPC client and an HTTP
// client with its kind's code, and with a message that speaks of the request, never of
// the server's flags.
package doors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/chunkup/chunkup/directdoor"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/httpdoor/coreadapter"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/upload"
)

// failing is an upload core whose every call fails with err, as the core explains it:
// the one core both doors are built on here.
type failing struct{ err error }

func (f *failing) fail(id string) error { return upload.Explain(id, f.err) }

func (f *failing) Plan(*upload.CreateRequest) (staging.Params, error) {
	return staging.Params{}, f.fail("")
}
func (f *failing) Create(context.Context, *upload.CreateRequest) (*staging.Upload, error) {
	return nil, f.fail("")
}
func (f *failing) CreatePlanned(context.Context, *upload.CreateRequest, staging.Params) (*staging.Upload, error) {
	return nil, f.fail("")
}
func (f *failing) Get(_ context.Context, id string) (*staging.Upload, error) { return nil, f.fail(id) }
func (f *failing) Params(_ context.Context, id string) (staging.Params, error) {
	return staging.Params{}, f.fail(id)
}
func (f *failing) Abort(_ context.Context, id, _ string) (*staging.Upload, error) {
	return nil, f.fail(id)
}
func (f *failing) Check(staging.Params, *upload.Chunk) (uint32, error) { return 0, f.fail("") }
func (f *failing) Take(_ context.Context, _ staging.Params, ch *upload.Chunk, _ *uint32) (upload.Taken, error) {
	return upload.Taken{}, f.fail(ch.UploadID)
}
func (f *failing) OpenStream(context.Context) (func(), error) { return func() {}, nil }
func (f *failing) FinishingStream(_ context.Context, open func()) (func(), bool) {
	return open, false
}
func (f *failing) ReserveStaging(context.Context, int64) error             { return nil }
func (f *failing) SettleStaging(int64, int64)                              {}
func (f *failing) Budgeted() bool                                          { return false }
func (f *failing) Config() upload.Config                                   { return upload.Config{Bucket: "b"}.WithDefaults() }
func (f *failing) Expires(*staging.Upload) time.Time                       { return time.Time{} }
func (f *failing) UploadLimit() int64                                      { return 1 << 40 }
func (f *failing) DeclareSize(_ context.Context, id string, _ int64) error { return f.fail(id) }
func (f *failing) SaveTail(_ context.Context, id string, _ uint32, _ []byte) error {
	return f.fail(id)
}
func (f *failing) ReadTail(_ context.Context, id string, _ staging.Tail) ([]byte, error) {
	return nil, f.fail(id)
}
func (f *failing) Stage(_ context.Context, id string, _ uint32, _ []byte, _ uint32, _ bool) (bool, error) {
	return false, f.fail(id)
}
func (f *failing) Lock(_ context.Context, id string) (context.Context, func(), error) {
	return nil, nil, f.fail(id)
}
func (f *failing) LockOpened(_ context.Context, id string, release func()) (context.Context, func(), error) {
	release()
	return nil, nil, f.fail(id)
}
func (f *failing) InProgress(context.Context, string, string, int) ([]*staging.Upload, string, error) {
	return nil, "", f.fail("")
}
func (f *failing) Progress(context.Context, string) (*staging.Subscription, error) {
	return nil, f.fail("")
}
func (f *failing) ListObjects(context.Context, string, string, int) ([]upload.Object, string, error) {
	return nil, "", f.fail("")
}
func (f *failing) StatObject(context.Context, string) (upload.Object, error) {
	return upload.Object{}, f.fail("")
}
func (f *failing) DeleteObject(context.Context, string, string) error { return f.fail("") }
func (f *failing) CreateDirect(context.Context, *upload.CreateRequest, bool) (*staging.Upload, error) {
	return nil, f.fail("")
}
func (f *failing) OffersDirect(int64) bool { return false }
func (f *failing) SignParts(_ context.Context, id string, _ []upload.PartToSign) ([]upload.SignedPart, error) {
	return nil, f.fail(id)
}
func (f *failing) DirectParts(_ context.Context, id string) ([]s3store.ListedPart, error) {
	return nil, f.fail(id)
}
func (f *failing) CompleteDirect(_ context.Context, id string, _ []upload.ReportedPart) (*staging.Upload, error) {
	return nil, f.fail(id)
}
func (f *failing) Partials(context.Context, []string) ([]*staging.Upload, int64, error) {
	return nil, 0, f.fail("")
}
func (f *failing) ClaimPartials(context.Context, string, []string, []*staging.Upload) error {
	return f.fail("")
}
func (f *failing) AssemblySlot(context.Context) (func(), error) { return nil, f.fail("") }
func (f *failing) OpenPartials(context.Context, []*staging.Upload) io.ReadCloser {
	return io.NopCloser(strings.NewReader(""))
}

var (
	_ server.Core            = (*failing)(nil)
	_ coreadapter.UploadCore = (*failing)(nil)
	_ directdoor.Core        = (*failing)(nil)
)

// flag is how a CLI flag looks in a message.
var flag = regexp.MustCompile(`--[a-z]`)

// TestEveryKindThroughBothDoors: for one real error of each kind, GetUpload's gRPC code
// and the HTTP door's status for HEAD and DELETE (tus and the IETF protocol) are the
// kind's, and no message names a flag. The direct-to-S3 door answers a part's signing
// and a completion with the IETF protocol's status.
func TestEveryKindThroughBothDoors(t *testing.T) {
	streams := upload.NewStreamCounter("upload streams", 1)
	_, _ = streams.Acquire("acme")
	_, overStreams := streams.Acquire("acme")
	rate := upload.NewTenantRateLimiter(1, 1)
	_ = rate.Limit(upload.WithTenant(context.Background(), "acme"))
	overRate := rate.Limit(upload.WithTenant(context.Background(), "acme"))
	for _, tc := range []struct {
		name     string
		err      error
		kind     fault.Kind
		code     codes.Code
		tus      int // the HTTP status for tus
		ietf     int // for the IETF protocol
		retryish bool
	}{
		{"a malformed id", upload.ValidID("x"), fault.Invalid, codes.InvalidArgument, 400, 400, false},
		{"a missing upload", staging.ErrNotFound, fault.NotFound, codes.NotFound, 404, 404, false},
		{"a chunk beyond the last", &staging.OutOfRangeError{N: 5, Total: 3}, fault.OutOfRange, codes.OutOfRange, 400, 400, false},
		{"an upload too large", &upload.TooLargeError{Msg: "the upload has 11 bytes; this server takes at most 10"}, fault.TooLarge, codes.InvalidArgument, 413, 413, false},
		{"an object at the key", &upload.ObjectExistsError{Key: "acme/k"}, fault.Exists, codes.AlreadyExists, 409, 409, false},
		{"no object at the key", &upload.ObjectNotFoundError{Key: "acme/k"}, fault.NotFound, codes.NotFound, 404, 404, false},
		{"a delete whose ETag no longer holds", &upload.PreconditionError{Msg: "the object has ETag x, not y"}, fault.Conflict, codes.FailedPrecondition, 409, 409, false},
		{"a completed upload", &staging.StateError{Status: staging.StatusCompleted}, fault.Conflict, codes.FailedPrecondition, 409, 409, false},
		{"an aborted upload", &staging.StateError{Status: staging.StatusAborted}, fault.Ended, codes.FailedPrecondition, 410, 410, false},
		{"a chunk being uploaded", staging.ErrChunkBusy, fault.Busy, codes.Aborted, 503, 503, true},
		{"a lost append lock", staging.ErrLockLost, fault.Locked, codes.Aborted, 423, 409, true},
		{"a corrupted chunk", &upload.ChecksumError{N: 1, Got: 1, Want: 2}, fault.DataLoss, codes.DataLoss, 400, 400, false},
		{"too many uploads in progress", staging.ErrTooManyUploads, fault.Exhausted, codes.ResourceExhausted, 429, 429, true},
		{"over the create or call rate", overRate, fault.Exhausted, codes.ResourceExhausted, 429, 429, true},
		{"Redis full", staging.ErrFull, fault.Overloaded, codes.ResourceExhausted, 503, 503, true},
		{"over the staged-bytes budget", &upload.BudgetError{Budget: 1 << 30, Waited: time.Second}, fault.Overloaded, codes.ResourceExhausted, 503, 503, true},
		{"over the streams a tenant may open", overStreams, fault.Overloaded, codes.ResourceExhausted, 503, 503, true},
		{"over the receive memory", &server.MemoryError{Limit: 1 << 30, Waited: time.Second, Tenant: true}, fault.Overloaded, codes.ResourceExhausted, 503, 503, true},
		{"Redis unreachable", fmt.Errorf("%w: %w", staging.ErrUnavailable, io.EOF), fault.Unavailable, codes.Unavailable, 503, 503, true},
		{"a server shutting down", upload.ErrDraining, fault.Unavailable, codes.Unavailable, 503, 503, true},
		{"an idle stream", &server.IdleError{Idle: time.Minute}, fault.Deadline, codes.DeadlineExceeded, 503, 503, false},
		{"a deadline", context.DeadlineExceeded, fault.Deadline, codes.DeadlineExceeded, 503, 503, false},
		{"a caller gone", context.Canceled, fault.Canceled, codes.Canceled, 503, 503, false},
		{"bad credentials", fault.New(fault.Unauthenticated, "the API key is not valid"), fault.Unauthenticated, codes.Unauthenticated, 401, 401, false},
		{"not an admin", &server.PermissionError{Msg: `tenant "acme" is not an admin tenant`}, fault.Denied, codes.PermissionDenied, 403, 403, false},
		{"OCR off", &server.UnsupportedError{Msg: "OCR is not enabled on this server"}, fault.Unsupported, codes.FailedPrecondition, 501, 501, false},
		{"a fault of the server", errors.New("boom"), fault.Internal, codes.Internal, 500, 500, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("the case's error is nil")
			}
			if got := fault.KindOf(upload.Explain("", tc.err)); got != tc.kind {
				t.Fatalf("kind %v, want %v", got, tc.kind)
			}
			core := &failing{err: tc.err}
			const id = "abcdefghijklmnopqrstuvwxyz"
			st := getOverGRPC(t, core, id)
			if st.Code() != tc.code {
				t.Errorf("gRPC: %v %q, want %v", st.Code(), st.Message(), tc.code)
			}
			if flag.MatchString(st.Message()) {
				t.Errorf("gRPC message names a flag: %q", st.Message())
			}
			door := httpDoor(t, core)
			for _, r := range []struct {
				method, version string
				want            int
			}{
				{http.MethodHead, "", tc.tus}, {http.MethodDelete, "", tc.tus},
				{http.MethodHead, "8", tc.ietf}, {http.MethodDelete, "8", tc.ietf},
			} {
				code, body, retry := overHTTP(t, door, r.method, id, r.version)
				if code != r.want {
					t.Errorf("HTTP %s (interop %q): %d %q, want %d", r.method, r.version, code, body, r.want)
				}
				if flag.MatchString(body) {
					t.Errorf("HTTP %s message names a flag: %q", r.method, body)
				}
				if tc.retryish && retry == "" {
					t.Errorf("HTTP %s: %d without Retry-After", r.method, code)
				}
			}
			direct := directdoor.New(core, directdoor.Config{Logger: slog.New(slog.DiscardHandler)})
			for _, r := range []struct{ method, path string }{{http.MethodGet, "/1"}, {http.MethodPost, "/complete"}} {
				req := httptest.NewRequest(r.method, "/s3/multipart/"+id+r.path, strings.NewReader(`{"parts":[{"PartNumber":1,"ETag":"x"}]}`))
				w := httptest.NewRecorder()
				direct.ServeHTTP(w, req)
				if w.Code != tc.ietf {
					t.Errorf("direct door %s %s: %d %q, want %d", r.method, r.path, w.Code, w.Body, tc.ietf)
				}
				if flag.MatchString(w.Body.String()) {
					t.Errorf("direct door message names a flag: %q", w.Body)
				}
				if tc.retryish && w.Header().Get("Retry-After") == "" {
					t.Errorf("direct door %s %s: %d without Retry-After", r.method, r.path, w.Code)
				}
			}
		})
	}
}

// getOverGRPC calls GetUpload on a gRPC server over core and returns its status.
func getOverGRPC(t *testing.T, core *failing, id string) *status.Status {
	t.Helper()
	svc, err := server.NewUploadService(server.Deps{Core: core, Lister: core, Progress: core}, server.Config{})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := server.NewGRPCServer(svc, slog.New(slog.DiscardHandler))
	lis := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = chunkupv1.NewUploadServiceClient(conn).GetUpload(ctx, &chunkupv1.GetUploadRequest{UploadId: id})
	return status.Convert(err)
}

// httpDoor is the HTTP door over core, through chunkup's adapter.
func httpDoor(t *testing.T, core *failing) http.Handler {
	t.Helper()
	adapter, err := coreadapter.New(core)
	if err != nil {
		t.Fatal(err)
	}
	h, err := httpdoor.New(adapter, httpdoor.Config{CoreTimeout: 5 * time.Second, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// overHTTP sends method on upload id's URL, with tus or (version set) the IETF
// protocol, and returns the status, the body and Retry-After.
func overHTTP(t *testing.T, door http.Handler, method, id, version string) (int, string, string) {
	t.Helper()
	r := httptest.NewRequest(method, "/files/"+id, nil)
	if version == "" {
		r.Header.Set("Tus-Resumable", "1.0.0")
	} else {
		r.Header.Set("Upload-Draft-Interop-Version", version)
	}
	w := httptest.NewRecorder()
	door.ServeHTTP(w, r)
	return w.Code, w.Body.String(), w.Header().Get("Retry-After")
}
