package upload_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/stagingtest"
	"github.com/chunkup/chunkup/upload"
)

// lineDoor is the smallest door there can be: a protocol of its own (here, Go calls
// with a file cut into lines of chunks) that needs nothing but the core. It imports
// neither the gRPC door (server) nor the HTTP one (httpdoor), which is what a new door
// such as the direct-to-S3 one starts from.
type lineDoor struct{ core *upload.Core }

// send creates an upload for data and hands its chunks to the core, each checked and
// made durable before send goes on; it returns the upload's id.
func (d lineDoor) send(ctx context.Context, name string, data []byte) (string, error) {
	up, err := d.core.Create(ctx, &upload.CreateRequest{Size: int64(len(data)), Name: name})
	if err != nil {
		return "", err
	}
	p, err := d.core.Params(ctx, up.ID)
	if err != nil {
		return "", err
	}
	for n := uint32(1); n <= p.Total; n++ {
		from := int64(n-1) * p.ChunkSize
		chunk := data[from:min(from+p.ChunkSize, int64(len(data)))]
		if _, err := d.core.Take(ctx, p, &upload.Chunk{UploadID: up.ID, N: n, Data: bytes.Clone(chunk)}, nil); err != nil {
			return up.ID, err
		}
	}
	return up.ID, nil
}

// TestADoorNeedsOnlyTheCore: a door built on the core alone creates an upload, has its
// chunks checked and staged, reads the state a client resumes from, sees the core's
// refusals with their kinds, and aborts.
func TestADoorNeedsOnlyTheCore(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	m := testenv.StartMinIO(t)
	m.CreateBucket(t, "door")
	st := stagingtest.Open(t, testenv.StartRedis(t).Client(t), staging.Config{})
	ender := &cleanup.Ender{Store: st.Uploads.Ends(), S3: s3store.New(m.Client(t))}
	core, err := upload.New(upload.Deps{Store: st.Uploads, Ender: ender}, upload.Config{Bucket: "door", ChunkSize: 5 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d := lineDoor{core: core}
	acme := upload.WithTenant(ctx, "acme")

	data := bytes.Repeat([]byte("a line of a file\n"), (12<<20)/17)
	id, err := d.send(acme, "lines.txt", data)
	if err != nil {
		t.Fatal(err)
	}
	up, err := core.Get(acme, id)
	if err != nil {
		t.Fatal(err)
	}
	if up.Status != staging.StatusActive || up.Total != 3 || len(up.Chunks) != 3 || up.ReceivedBytes != int64(len(data)) ||
		up.Key != "acme/uploads/"+id+"/lines.txt" {
		t.Fatalf("after every chunk: %+v", up)
	}

	// The refusals a door passes on, each of its kind.
	p, _ := core.Params(acme, id)
	if _, err := core.Take(acme, p, &upload.Chunk{UploadID: id, N: 4, Data: []byte("x")}, nil); !fault.Has(err, fault.OutOfRange) {
		t.Errorf("a fourth chunk of three: %v (%v), want out of range", err, fault.KindOf(err))
	}
	sum := uint32(1)
	if _, err := core.Take(acme, p, &upload.Chunk{UploadID: id, N: 1, Data: data[:5<<20], CRC32C: &sum}, nil); !fault.Has(err, fault.DataLoss) {
		t.Errorf("a corrupted chunk: %v (%v), want data loss", err, fault.KindOf(err))
	}
	if _, err := core.Get(upload.WithTenant(ctx, "other"), id); !fault.Has(err, fault.NotFound) {
		t.Errorf("another tenant's read: %v (%v), want not found", err, fault.KindOf(err))
	}

	if _, err := core.Abort(acme, id, "the door's client went away"); err != nil {
		t.Fatal(err)
	}
	if _, err := core.Take(acme, p, &upload.Chunk{UploadID: id, N: 1, Data: data[:5<<20]}, nil); !fault.Has(err, fault.Ended) {
		t.Errorf("a chunk after the abort: %v (%v), want ended", err, fault.KindOf(err))
	}
}
