package uploads_test

import (
	"errors"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/internal/testenv"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// A tenant has at most MaxActivePerTenant uploads in progress, counted over both ways
// of creating one (Reserve + CreateReserved, Create); another tenant is not held back,
// an ended upload frees its place, a retried create of an upload that exists is not
// refused, and entries that lead to no upload (a create that died) do not hold a place.
func TestMaxActivePerTenant(t *testing.T) {
	r := testenv.StartRedis(t)
	client := r.Client(t)
	clk := testenv.NewClock(time.Unix(1_800_000_000, 0))
	const limit = 3
	s := openStore(t, client, staging.Config{Now: clk.Now, MaxActivePerTenant: limit})
	ctx := ctxT(t)

	create := func(tenant string) (string, error) {
		t.Helper()
		id := ids.New()
		at := clk.Now()
		bound, err := s.Reserve(ctx, tenant, "", id, at)
		if err != nil {
			return "", err
		}
		ok, err := s.CreateReserved(ctx, staging.NewUpload{ID: bound, Bucket: "b", Key: "k/" + bound, ChunkSize: 4, ExpectedSize: -1, Tenant: tenant, At: at})
		if err == nil && !ok {
			t.Fatalf("create %s: exists", bound)
		}
		return bound, err
	}
	var a []string
	for range limit {
		id, err := create("a")
		if err != nil {
			t.Fatal(err)
		}
		a = append(a, id)
	}
	if _, err := create("a"); !errors.Is(err, staging.ErrTooManyUploads) {
		t.Fatalf("create past the cap: %v, want ErrTooManyUploads", err)
	}
	// Create (the path of an id bound before) is counted too.
	if _, err := s.Create(ctx, staging.NewUpload{ID: ids.New(), Bucket: "b", Key: "k", ChunkSize: 4, ExpectedSize: -1, Tenant: "a", At: clk.Now()}); !errors.Is(err, staging.ErrTooManyUploads) {
		t.Fatalf("Create past the cap: %v, want ErrTooManyUploads", err)
	}
	// A retried create of an upload that exists is not refused.
	if ok, err := s.Create(ctx, staging.NewUpload{ID: a[0], Bucket: "b", Key: "k/" + a[0], ChunkSize: 4, ExpectedSize: -1, Tenant: "a", At: clk.Now().Add(time.Second)}); err != nil || ok {
		t.Fatalf("retried create: %v %v, want exists", ok, err)
	}
	if _, err := create("b"); err != nil {
		t.Fatalf("the other tenant: %v", err)
	}
	// Nothing of the refused creates is left: the count is what it was.
	if n, err := client.ZCard(ctx, "chunkup:tenant:{a}:uploads").Result(); err != nil || n != limit {
		t.Fatalf("tenant a's list holds %d (%v), want %d", n, err, limit)
	}

	// An ended upload frees its place.
	if _, err := s.Ends().End(ctx, uploads.EndRequest{ID: a[0], Status: staging.StatusAborted, Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	id, err := create("a")
	if err != nil {
		t.Fatalf("create after an abort: %v", err)
	}
	// An entry whose upload is gone (its keys lost, a create that died) holds no place.
	if err := client.Del(ctx, "chunkup:up:{"+id+"}:state").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := create("a"); err != nil {
		t.Fatalf("create with a stale entry: %v", err)
	}
}
