package upload

import (
	"strings"
	"testing"

	"github.com/chunkup/chunkup/s3store"
)

// TestMatchParts: what a client reports against what S3 holds, one mismatch at a time.
func TestMatchParts(t *testing.T) {
	const mib = 1 << 20
	crc := s3store.CRC32CHeader(0xdeadbeef)
	held := func() []s3store.ListedPart {
		return []s3store.ListedPart{{N: 1, ETag: `"a"`, Size: 5 * mib, CRC32C: crc}, {N: 2, ETag: `"b"`, Size: 5 * mib}, {N: 3, ETag: `"c"`, Size: 10}}
	}
	reported := func() []ReportedPart {
		return []ReportedPart{{N: 1, ETag: "a"}, {N: 2, ETag: `"b"`, Size: 5 * mib}, {N: 3, ETag: `"c"`}}
	}
	other := uint32(1)
	for _, tc := range []struct {
		name   string
		change func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart)
		want   string // "" matches
	}{
		{"as reported", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) { return h, r }, ""},
		{"a part listed twice", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) {
			return append([]s3store.ListedPart{{N: 2, ETag: `"old"`, Size: 5 * mib}}, h...), r
		}, ""},
		{"another ETag", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) {
			r[1].ETag = "x"
			return h, r
		}, "part 2 was reported with ETag x, but S3 holds it with \"b\""},
		{"not in S3", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) { return h[:2], r }, "part 3 was reported, but S3 does not hold it"},
		{"not reported", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) { return h, r[:2] }, "S3 holds part 3, which was not reported"},
		{"another size", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) {
			r[2].Size = 11
			return h, r
		}, "part 3 was reported with 11 bytes, but S3 holds 10"},
		{"small before the last", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) {
			h[1].Size = mib
			r[1].Size = 0
			return h, r
		}, "part 2 has 1048576 bytes: every part but the last"},
		{"another CRC32C", func(h []s3store.ListedPart, r []ReportedPart) ([]s3store.ListedPart, []ReportedPart) {
			r[0].CRC32C = &other
			return h, r
		}, "part 1 was reported with CRC32C 00000001, but S3 holds bytes with deadbeef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, r := tc.change(held(), reported())
			_, sums, why := matchParts(r, h, false)
			if tc.want == "" {
				if why != "" {
					t.Fatalf("refused: %s", why)
				}
				if sums[0] == nil || *sums[0] != 0xdeadbeef || sums[1] != nil || sums[2] != nil {
					t.Fatalf("CRC32Cs %v: want S3's for part 1 only", sums)
				}
				return
			}
			if !strings.Contains(why, tc.want) {
				t.Fatalf("got %q, want it to say %q", why, tc.want)
			}
		})
	}
}
