package e2e

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/crc"
	"github.com/chunkup/chunkup/server"
)

// readRaw reads req through the raw stub as a client written from the proto would, and
// checks what the proto promises of every message: at most 1 MiB, in order from
// req.offset, each with its CRC32C, the first describing the object.
func readRaw(t *testing.T, api chunkupv1.UploadServiceClient, req *chunkupv1.ReadObjectRequest) (*chunkupv1.ReadObjectResponse, []byte) {
	t.Helper()
	stream, err := api.ReadObject(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	var first *chunkupv1.ReadObjectResponse
	var got []byte
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("ReadObject(%v): %v", req, err)
		}
		if first == nil {
			first = m
		} else if m.ObjectSize != 0 || m.Upload != nil {
			t.Fatalf("a message after the first describes the object: %v", m)
		}
		if len(m.Data) > 1<<20 {
			t.Fatalf("a message of %d bytes, more than 1 MiB", len(m.Data))
		}
		if want := req.Offset + int64(len(got)); m.Offset != want {
			t.Fatalf("message at offset %d, want %d", m.Offset, want)
		}
		if m.Crc32C != crc.Checksum(m.Data) {
			t.Fatalf("message at %d: CRC32C %08x, its data's is %08x", m.Offset, m.Crc32C, crc.Checksum(m.Data))
		}
		got = append(got, m.Data...)
	}
	if first == nil {
		t.Fatalf("ReadObject(%v) sent no message", req)
	}
	return first, got
}

// TestReadObject reads completed objects back through the raw stub and the SDK: whole,
// by upload id and by key, in ranges, empty; and bad requests get precise statuses.
func TestReadObject(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Auth = server.AuthConfig{JWTSecret: jwtSecret}
	a := e.start(t, cfg)
	acmeClient := e.client(t, a, client.WithBearerToken(token(t, "acme")))
	acme := acmeClient.API()
	globex := e.client(t, a, client.WithBearerToken(token(t, "globex"))).API()

	data := randomBytes(11<<20+333, 77) // three chunks, a multipart object
	big, err := acmeClient.Upload(ctx(t), reader(data), client.WithName("big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	empty, err := acmeClient.Upload(ctx(t), reader(nil), client.WithName("empty.bin"))
	if err != nil {
		t.Fatal(err)
	}
	small := []byte("a small object, in one piece")
	one, err := acmeClient.Upload(ctx(t), reader(small), client.WithName("small.txt"))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("whole objects", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			req  *chunkupv1.ReadObjectRequest
			want []byte
			up   *chunkupv1.Upload
		}{
			{"multipart by id", &chunkupv1.ReadObjectRequest{UploadId: big.UploadId}, data, big},
			{"multipart by key", &chunkupv1.ReadObjectRequest{Key: big.Key}, data, nil},
			{"one part by id", &chunkupv1.ReadObjectRequest{UploadId: one.UploadId}, small, one},
			{"one part by key", &chunkupv1.ReadObjectRequest{Key: one.Key}, small, nil},
			{"empty by id", &chunkupv1.ReadObjectRequest{UploadId: empty.UploadId}, nil, empty},
			{"empty by key", &chunkupv1.ReadObjectRequest{Key: empty.Key}, nil, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				first, got := readRaw(t, acme, tc.req)
				if !bytes.Equal(got, tc.want) {
					t.Fatalf("read %d bytes that differ from the %d uploaded", len(got), len(tc.want))
				}
				if first.ObjectSize != int64(len(tc.want)) {
					t.Fatalf("object_size %d, want %d", first.ObjectSize, len(tc.want))
				}
				if first.HasObjectCrc32C && first.ObjectCrc32C != crc.Checksum(tc.want) {
					t.Fatalf("object_crc32c %08x, the object's is %08x", first.ObjectCrc32C, crc.Checksum(tc.want))
				}
				if tc.up != nil && (!first.HasObjectCrc32C || first.Upload.GetUploadId() != tc.up.UploadId) {
					t.Fatalf("read by id: first message %v; want the upload and its CRC32C", first)
				}
				var w bytes.Buffer
				if _, err := acmeClient.ReadObject(ctx(t), tc.req, &w); err != nil || !bytes.Equal(w.Bytes(), tc.want) {
					t.Fatalf("SDK ReadObject: %d bytes, %v", w.Len(), err)
				}
			})
		}
	})

	t.Run("ranges", func(t *testing.T) {
		size := int64(len(data))
		for _, tc := range []struct {
			name          string
			offset, limit int64
		}{
			{"across chunks", 5<<20 - 3, 2<<20 + 7},
			{"to the end", size - 1000, 0},
			{"limit past the end", size - 10, 1 << 30},
			{"one byte", 12345, 1},
			{"at the end", size, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				req := &chunkupv1.ReadObjectRequest{UploadId: big.UploadId, Offset: tc.offset, Limit: tc.limit}
				end := size
				if tc.limit > 0 {
					end = min(size, tc.offset+tc.limit)
				}
				first, got := readRaw(t, acme, req)
				if !bytes.Equal(got, data[tc.offset:end]) {
					t.Fatalf("range [%d, %d): %d bytes that differ", tc.offset, end, len(got))
				}
				if first.ObjectSize != size {
					t.Fatalf("object_size %d in a range read, want the object's %d", first.ObjectSize, size)
				}
				var w bytes.Buffer
				if _, err := acmeClient.ReadObject(ctx(t), req, &w); err != nil || !bytes.Equal(w.Bytes(), data[tc.offset:end]) {
					t.Fatalf("SDK range read: %d bytes, %v", w.Len(), err)
				}
			})
		}
	})

	active, err := acme.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "unfinished.bin"})
	if err != nil {
		t.Fatal(err)
	}
	aborted, err := acme.CreateUpload(ctx(t), &chunkupv1.CreateUploadRequest{Name: "given-up.bin"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := acme.AbortUpload(ctx(t), &chunkupv1.AbortUploadRequest{UploadId: aborted.Upload.UploadId}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		api  chunkupv1.UploadServiceClient
		req  *chunkupv1.ReadObjectRequest
		code codes.Code
		says string
	}{
		{"neither id nor key", acme, &chunkupv1.ReadObjectRequest{}, codes.InvalidArgument, "exactly one of upload_id and key"},
		{"both id and key", acme, &chunkupv1.ReadObjectRequest{UploadId: big.UploadId, Key: big.Key}, codes.InvalidArgument, "exactly one of upload_id and key"},
		{"negative offset", acme, &chunkupv1.ReadObjectRequest{UploadId: big.UploadId, Offset: -1}, codes.InvalidArgument, "must not be negative"},
		{"negative limit", acme, &chunkupv1.ReadObjectRequest{UploadId: big.UploadId, Limit: -1}, codes.InvalidArgument, "must not be negative"},
		{"offset past the end", acme, &chunkupv1.ReadObjectRequest{UploadId: big.UploadId, Offset: int64(len(data)) + 1}, codes.OutOfRange, "past the object's"},
		{"malformed id", acme, &chunkupv1.ReadObjectRequest{UploadId: "../etc"}, codes.InvalidArgument, "upload_id"},
		{"unknown id", acme, &chunkupv1.ReadObjectRequest{UploadId: "aaaaaaaaaaaaaaaaaaaaaaaaaa"}, codes.NotFound, "not found"},
		{"upload in progress", acme, &chunkupv1.ReadObjectRequest{UploadId: active.Upload.UploadId}, codes.FailedPrecondition, "once it is COMPLETED"},
		{"aborted upload", acme, &chunkupv1.ReadObjectRequest{UploadId: aborted.Upload.UploadId}, codes.FailedPrecondition, "has no object"},
		{"another tenant's upload", globex, &chunkupv1.ReadObjectRequest{UploadId: big.UploadId}, codes.NotFound, "not found"},
		{"another tenant's key", globex, &chunkupv1.ReadObjectRequest{Key: big.Key}, codes.NotFound, "not found"},
		{"no such key", acme, &chunkupv1.ReadObjectRequest{Key: "acme/nothing/here"}, codes.NotFound, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := tc.api.ReadObject(ctx(t), tc.req)
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.says) {
				t.Fatalf("%v, want %s saying %q", err, tc.code, tc.says)
			}
		})
	}
}

// TestReadLimit: a tenant's ReadObject streams are capped (--max-reads-per-tenant),
// each holding memory and an S3 connection while its client does not read; past the
// cap a read is RESOURCE_EXHAUSTED saying so, and a slot frees when its stream
// ends.
func TestReadLimit(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.Server.MaxReadsPerTenant = 2
	a := e.start(t, cfg)
	c := e.client(t, a)
	// Larger than what HTTP/2 flow control lets the server send ahead of a client that
	// does not read (grpc-go grows a stream's window up to 16 MiB): a smaller object is
	// sent whole into the client's buffers, its stream ends on the server, and its slot
	// is free although the client holds the stream (a CI run read 3 MiB so).
	data := randomBytes(40*MiB, 72)
	up, err := c.Upload(ctx(t), reader(data))
	if err != nil {
		t.Fatal(err)
	}
	open := func() (chunkupv1.UploadService_ReadObjectClient, error) {
		t.Helper()
		st, err := c.API().ReadObject(ctx(t), &chunkupv1.ReadObjectRequest{UploadId: up.UploadId})
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv() // the first message: the stream is open on the server
		return st, err
	}
	held := make([]chunkupv1.UploadService_ReadObjectClient, 0, 2)
	for range 2 {
		st, err := open()
		if err != nil {
			t.Fatalf("a read within the limit: %v", err)
		}
		held = append(held, st) // and not read further
	}
	_, err = open()
	expectStatus(t, "a third read", err, codes.ResourceExhausted, "ReadObject streams open on this server")
	// Read one held stream to its end: its slot frees, and a new read gets it.
	for {
		if _, err := held[0].Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
	}
	waitFor(t, "a freed read slot", func() bool {
		st, err := open()
		if err != nil {
			return false
		}
		for {
			if _, err := st.Recv(); err != nil {
				return errors.Is(err, io.EOF)
			}
		}
	})
}
