package upload

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/uploads"
)

// Direct uploads: the client puts each part straight into S3 with a URL the core signs,
// and the core keeps everything else: the upload's record, tenant, key, expiry, the
// check of what S3 holds against what the client reports, and the one completion
// through the completer, with its event. See docs/direct-uploads.md.

// DirectS3 is what direct uploads need of S3 (see s3store.Store and s3store.Presigner).
type DirectS3 interface {
	CreateDirectMultipart(ctx context.Context, bucket, key, ct string, o s3store.Owner, checksummed bool) (string, error)
	ListParts(ctx context.Context, bucket, key, uploadID string) ([]s3store.ListedPart, error)
	SignPart(ctx context.Context, bucket, key, uploadID string, n uint32, ttl time.Duration, size int64, crc *uint32) (s3store.Signed, error)
	Abort(ctx context.Context, bucket, key, uploadID string) error
	// Checksums reports whether the store takes CRC32C checksums (some refuse them).
	Checksums() bool
}

// DirectStore records a direct upload's activity and parts (see uploads.Store's
// TouchDirect and RecordDirectParts).
type DirectStore interface {
	TouchDirect(ctx context.Context, id, tenant string, maxN uint32, noCRC bool) (uploads.DirectTarget, error)
	RecordDirectParts(ctx context.Context, id string, parts []uploads.DirectPart, completes bool) (ready bool, err error)
}

var _ DirectStore = (*uploads.Store)(nil)

// DefaultDirectURLTTL is how long a signed part URL is valid by default: long enough
// for a slow client to send a large part, short enough that a leaked URL is soon of no
// use.
const DefaultDirectURLTTL = 15 * time.Minute

// PartToSign asks for the URL of one part. Size and CRC32C, when given, are bound
// into the signature, so that S3 itself refuses other bytes.
type PartToSign struct {
	N      uint32
	Size   int64 // 0: not bound
	CRC32C *uint32
}

// SignedPart is a part's presigned PUT.
type SignedPart struct {
	N uint32
	s3store.Signed
	Expires time.Time
}

// ReportedPart is a part the client says it put: its number and the ETag S3 answered,
// and, when it knows them, its size and CRC32C.
type ReportedPart struct {
	N      uint32
	ETag   string
	Size   int64 // 0: not reported
	CRC32C *uint32
}

// errNoDirect refuses direct uploads on a server that makes none.
var errNoDirect = fault.New(fault.Unsupported, "this server takes no direct uploads to S3: send the bytes through it instead (an upload created without direct)")

// directID refuses id on a server without direct uploads, or when it names no upload.
func (c *Core) directID(id string) error {
	if c.direct == nil {
		return errNoDirect
	}
	return ValidID(id)
}

// directUpload reads direct upload id of the caller's tenant.
func (c *Core) directUpload(ctx context.Context, id string) (*staging.Upload, error) {
	if err := c.directID(id); err != nil {
		return nil, err
	}
	u, err := c.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !u.Direct {
		return nil, invalidf("not a direct upload: send its chunks to chunkup")
	}
	return u, nil
}

// CreateDirect creates a direct upload (req as for Create): the record, and the S3
// multipart upload its client will put parts into; checksums says the client will give
// each part's CRC32C (S3 then refuses a part without it).
func (c *Core) CreateDirect(ctx context.Context, req *CreateRequest, checksums bool) (*staging.Upload, error) {
	if c.direct == nil {
		return nil, Explain("", errNoDirect)
	}
	p, err := c.plan(req)
	if err != nil {
		return nil, Explain("", err)
	}
	r := *req
	r.direct, r.directChecksums = true, checksums && c.direct.Checksums()
	up, err := c.create(ctx, &r, p)
	return up, Explain("", err)
}

// OffersDirect reports whether a create of size bytes (-1: unknown) that takes a direct
// upload when offered gets one (Config.DirectAbove).
func (c *Core) OffersDirect(size int64) bool {
	return c.direct != nil && c.cfg.DirectAbove > 0 && size >= c.cfg.DirectAbove
}

// createMultipart makes the multipart upload of direct upload nu (before its record is
// written: the record names it).
func (c *Core) createMultipart(ctx context.Context, nu *staging.NewUpload, checksums bool) error {
	mpu, err := c.direct.CreateDirectMultipart(ctx, nu.Bucket, nu.Key, nu.ContentType,
		s3store.Owner{UploadID: nu.ID, IfAbsent: nu.IfAbsent}, checksums)
	if err != nil {
		return fault.Wrap(err, fault.Unavailable, "S3 did not start the multipart upload: "+s3store.Reason(err))
	}
	nu.Direct, nu.MultipartID, nu.MultipartChecksummed = true, mpu, checksums
	return nil
}

// SignParts signs the PUT of each part of direct upload id, valid for the configured
// TTL. Signing counts as activity: an upload whose client keeps asking for URLs is not
// expired as idle.
func (c *Core) SignParts(ctx context.Context, id string, parts []PartToSign) ([]SignedPart, error) {
	out, err := c.signParts(ctx, id, parts)
	return out, Explain(id, err)
}

func (c *Core) signParts(ctx context.Context, id string, parts []PartToSign) ([]SignedPart, error) {
	if len(parts) == 0 || len(parts) > 1000 {
		return nil, invalidf("ask for 1 to 1,000 parts at a time, not %d", len(parts))
	}
	for _, p := range parts {
		if p.N < 1 || p.N > MaxParts {
			return nil, &RangeError{Msg: fmt.Sprintf("part number %d is outside 1 to %d (S3's limit)", p.N, MaxParts)}
		}
		if p.Size < 0 {
			return nil, invalidf("part %d's size %d is negative: give its size in bytes, or 0 to leave it unbound", p.N, p.Size)
		}
		if p.Size > MaxPartSize {
			return nil, invalidf("part %d's size %d is over S3's limit of 5 GiB a part", p.N, p.Size)
		}
	}
	if err := c.directID(id); err != nil {
		return nil, err
	}
	var maxN uint32
	var noCRC *PartToSign // the first part without a CRC32C
	for i, p := range parts {
		maxN = max(maxN, p.N)
		if p.CRC32C == nil && noCRC == nil {
			noCRC = &parts[i]
		}
	}
	// The upload as signing needs it, checked against the parts, and its activity
	// recorded, in one round trip (a client may ask for each part's URL on its own);
	// a refusal touches nothing.
	u, err := c.directStore.TouchDirect(ctx, id, TenantFrom(ctx), maxN, noCRC != nil)
	var beyond *uploads.BeyondError
	switch {
	case errors.As(err, &beyond):
		return nil, &RangeError{Msg: fmt.Sprintf("part %d is beyond the upload's %d parts", maxN, beyond.Total)}
	case errors.Is(err, uploads.ErrCRCRequired):
		return nil, invalidf("part %d: give its CRC32C (the upload was created with checksums, and S3 takes its parts only with theirs)", noCRC.N)
	case err != nil:
		return nil, err
	case !u.Direct:
		return nil, invalidf("not a direct upload: send its chunks to chunkup")
	}
	// An upload of a known size has every part's: a URL for another size would take
	// bytes the completion must then refuse, failing the upload.
	if u.Total > 0 {
		for _, p := range parts {
			if want := staging.ChunkLen(p.N, u.Expected, u.ChunkSize); p.Size != 0 && p.Size != want {
				return nil, invalidf("part %d must have %d bytes (every part but the last has the upload's chunk size, %d, and the last the rest of its %d bytes), not %d: give that size, or 0 to have it bound for you",
					p.N, want, u.ChunkSize, u.Expected, p.Size)
			}
		}
	}
	expires := c.store.Now().Add(c.cfg.DirectURLTTL)
	out := make([]SignedPart, len(parts))
	for i, p := range parts {
		if u.Total > 0 { // a known size binds every part's
			p.Size = staging.ChunkLen(p.N, u.Expected, u.ChunkSize)
		}
		if !u.Checksummed {
			p.CRC32C = nil // a multipart upload without checksums refuses parts with one
		}
		s, err := c.direct.SignPart(ctx, u.Bucket, u.Key, u.MultipartID, p.N, c.cfg.DirectURLTTL, p.Size, p.CRC32C)
		if err != nil {
			return nil, fault.Wrap(err, fault.Internal, fmt.Sprintf("part %d could not be signed", p.N))
		}
		out[i] = SignedPart{N: p.N, Signed: s, Expires: expires}
	}
	return out, nil
}

// DirectParts lists the parts S3 holds of direct upload id (what a client resuming it
// need not put again).
func (c *Core) DirectParts(ctx context.Context, id string) ([]s3store.ListedPart, error) {
	u, err := c.directUpload(ctx, id)
	if err != nil {
		return nil, Explain(id, err)
	}
	if u.Status != staging.StatusActive {
		// Not Explain's message for a state error, which speaks of sending chunks.
		se := &staging.StateError{Status: u.Status}
		where := "its object holds them"
		if k := se.Kind(); k == fault.Ended {
			where = "they were discarded when it ended"
		} else if u.Status == staging.StatusCompleting {
			where = "it is being completed"
		}
		return nil, fault.Wrap(se, se.Kind(), fmt.Sprintf("upload %s is %s: its parts are listed only while it is ACTIVE (%s); GetUpload shows its state", id, u.Status, where))
	}
	parts, err := c.direct.ListParts(ctx, u.Bucket, u.Key, u.MultipartID)
	if err != nil {
		return nil, Explain(id, fault.Wrap(err, fault.Unavailable, "S3 did not list the upload's parts: "+s3store.Reason(err)))
	}
	return parts, nil
}

// MismatchError is a direct upload's completion refused because what S3 holds is not
// what the client reported: the upload is FAILED with Reason, and no object written.
type MismatchError struct{ Reason string }

func (e *MismatchError) Error() string { return e.Reason }

// Kind implements fault's kinded errors.
func (e *MismatchError) Kind() fault.Kind { return fault.Conflict }

// CompleteDirect completes direct upload id from the parts its client reports: the
// parts 1 to N, each with the ETag S3 gave it. It lists what S3 holds first: a part
// missing there, another ETag, size or CRC32C than reported, or a part S3 holds that
// was not reported fails the upload (a *MismatchError saying why; its multipart upload
// is aborted), so that no object is made of other bytes than the client's. Otherwise
// the parts are recorded and the upload completed through the completer, at once when
// this process has one; it returns the upload as it is then (COMPLETED, or COMPLETING
// while the completer role finishes it). Completing a completing or completed upload
// again with the same parts returns it; with other parts it is a Conflict (sameParts).
func (c *Core) CompleteDirect(ctx context.Context, id string, reported []ReportedPart) (*staging.Upload, error) {
	up, err := c.completeDirect(ctx, id, reported)
	return up, Explain(id, err)
}

func (c *Core) completeDirect(ctx context.Context, id string, reported []ReportedPart) (*staging.Upload, error) {
	if len(reported) == 0 || len(reported) > MaxParts {
		return nil, invalidf("report 1 to %d parts, not %d", MaxParts, len(reported))
	}
	parts := slices.Clone(reported)
	slices.SortFunc(parts, func(a, b ReportedPart) int { return cmp.Compare(a.N, b.N) })
	for i, p := range parts {
		if p.N < 1 || p.N > MaxParts {
			return nil, invalidf("part %d is not a part number: parts are numbered 1 to %d", p.N, MaxParts)
		}
		if i > 0 && p.N == parts[i-1].N {
			return nil, invalidf("part %d is reported twice: report each part once, with the ETag of its last PUT", p.N)
		}
		if p.N != uint32(i+1) {
			return nil, invalidf("part %d is not reported: report the parts numbered 1 to %d, each once", i+1, parts[len(parts)-1].N)
		}
		if strings.Trim(p.ETag, `"`) == "" {
			return nil, invalidf("part %d has no ETag: report the ETag S3 answered its PUT with", p.N)
		}
	}
	u, err := c.directUpload(ctx, id)
	if err != nil {
		return nil, err
	}
	switch u.Status {
	case staging.StatusCompleted, staging.StatusCompleting:
		return c.sameParts(ctx, u, parts)
	case staging.StatusActive:
	default:
		se := &staging.StateError{Status: u.Status}
		why := ""
		if u.Error != "" {
			why = " (" + u.Error + ")"
		}
		return nil, fault.Wrap(se, se.Kind(), fmt.Sprintf("upload %s is %s%s and takes no completion: create a new upload to send the file again", id, u.Status, why))
	}
	if u.Total > 0 && uint32(len(parts)) != u.Total {
		return nil, invalidf("the upload has %d parts (its size says so), not %d", u.Total, len(parts))
	}
	done, err := c.finishDirect(ctx, u, parts)
	if err != nil {
		// Another completion of the upload, at the same time, may have completed it
		// meanwhile (S3 then no longer lists the parts, and the upload takes no other
		// outcome): this one returns the upload as that one left it.
		if now, gerr := c.get(ctx, id); gerr == nil && (now.Status == staging.StatusCompleted || now.Status == staging.StatusCompleting) {
			if _, mismatch := c.sameParts(ctx, now, parts); mismatch == nil {
				return now, nil
			}
		}
	}
	return done, err
}

// sameParts returns direct upload u, completing or completed by another completion
// (or this one repeated), when report parts (in order) are the parts it recorded: a
// completion repeated gets the upload, but a report of other parts is refused (Conflict)
// rather than answered with an object it does not describe.
func (c *Core) sameParts(ctx context.Context, u *staging.Upload, parts []ReportedPart) (*staging.Upload, error) {
	if uint32(len(parts)) != u.Total {
		return nil, c.otherParts(u, fmt.Sprintf("it has %d parts, and this report %d", u.Total, len(parts)))
	}
	rec, err := c.store.RecordedParts(ctx, u.ID, u.Total)
	switch {
	case errors.Is(err, uploads.ErrPartMissing):
		// None is completed without them: nothing to compare with, and no reason to
		// refuse a repeat.
		c.cfg.Logger.Warn("a completed direct upload's parts are not recorded", "upload_id", u.ID, "err", err)
		return u, nil
	case err != nil:
		return nil, err
	}
	for i, p := range parts {
		r := rec[i]
		switch {
		case !s3store.SameETag(p.ETag, r.ETag):
			return nil, c.otherParts(u, fmt.Sprintf("part %d was reported with ETag %s, but it holds %s", p.N, p.ETag, r.ETag))
		case p.Size > 0 && p.Size != r.Size:
			return nil, c.otherParts(u, fmt.Sprintf("part %d was reported with %d bytes, but it holds %d", p.N, p.Size, r.Size))
		case p.CRC32C != nil && !r.NoCRC && *p.CRC32C != r.CRC32C:
			return nil, c.otherParts(u, fmt.Sprintf("part %d was reported with CRC32C %08x, but it holds bytes with %08x", p.N, *p.CRC32C, r.CRC32C))
		}
	}
	return u, nil
}

// otherParts: a report that is not the parts direct upload u is being, or was,
// completed from.
func (c *Core) otherParts(u *staging.Upload, why string) error {
	return fault.New(fault.Conflict, fmt.Sprintf("upload %s is %s from parts other than this report's (%s): its object is made of the parts of the completion that came first; read it with GetUpload", u.ID, u.Status, why))
}

// finishDirect checks the parts S3 holds for active direct upload u against parts (the
// client's report, in order), records them and completes the upload.
func (c *Core) finishDirect(ctx context.Context, u *staging.Upload, parts []ReportedPart) (*staging.Upload, error) {
	id := u.ID
	held, err := c.direct.ListParts(ctx, u.Bucket, u.Key, u.MultipartID)
	if err != nil {
		if s3store.NoSuchUpload(err) {
			return nil, c.failDirect(ctx, u, "S3 no longer has the upload's multipart upload (it was aborted or expired outside chunkup): upload the file again")
		}
		return nil, fault.Wrap(err, fault.Unavailable, "S3 did not list the upload's parts: "+s3store.Reason(err))
	}
	held, sums, why := matchParts(parts, held, u.MultipartChecksummed)
	if why == "" {
		why = c.sizeRule(u, held)
	}
	if why != "" {
		return nil, c.failDirect(ctx, u, why)
	}
	if u.MultipartChecksummed {
		for i, s := range sums {
			if s == nil { // S3 does not list it, and the client did not report it
				return nil, invalidf("part %d: report its CRC32C (the upload was created with checksums)", held[i].N)
			}
		}
	}
	// The records are made even if the caller goes away: the completion they lead
	// to is indexed with them, and this process completes it below. One script
	// records every part (up to 1,000 at a time): a direct upload's parts pass no
	// bytes through chunkup, so nothing leases them, and per part round trips were
	// most of the server's work for such an upload (docs/performance.md, run J).
	rec := make([]uploads.DirectPart, len(held))
	for i, p := range held {
		rec[i] = uploads.DirectPart{N: p.N, ETag: p.ETag, CRC32C: sums[i], Size: p.Size}
	}
	// This process completes it when it has a completer; else the completer role does,
	// at once.
	raced := false
	if _, err := c.directStore.RecordDirectParts(context.WithoutCancel(ctx), id, rec, c.completer != nil); err != nil {
		var se *staging.StateError
		if !errors.As(err, &se) || se.Status != staging.StatusCompleting && se.Status != staging.StatusCompleted {
			return nil, err
		}
		// Another completion of the upload, at the same time, recorded the parts first
		// (the same parts: both matched what S3 holds) and completes it: this one
		// returns the upload as that one left it.
		raced = true
	}
	var done *staging.Upload
	inline := !slices.Contains(sums, nil)
	if c.completer != nil && inline && !raced {
		// At once, when the object's CRC32C is known from its parts.
		done = c.completeNow(ctx, id, nil)
	}
	if done == nil {
		if done, err = c.get(ctx, id); err != nil {
			return nil, err
		}
	}
	switch {
	case done.Status == staging.StatusCompleted, done.Status == staging.StatusCompleting:
		return done, nil
	case done.Status == staging.StatusActive && done.Total > 0 && done.Uploaded == done.Total:
		// Every part is recorded and the completion indexed: it is under way (the
		// completer role's, or this process's now, out of this request when it reads
		// the object for its CRC32C).
		if c.completer != nil && !inline && !raced {
			go c.completeNow(context.WithoutCancel(ctx), id, nil)
		}
		done.Status = staging.StatusCompleting
		return done, nil
	case done.Status == staging.StatusActive:
		// The records made it ready, yet it is not: they were lost meanwhile (a Redis
		// failover to a replica without them). A repeat records them again.
		return nil, fault.Errorf(fault.Busy, "upload %s lost the record of its parts meanwhile: retry the completion", id)
	}
	return nil, fault.Wrap(&staging.StateError{Status: done.Status}, fault.Ended,
		fmt.Sprintf("upload %s is %s: %s", id, done.Status, done.Error))
}

// sizeRule says how the parts S3 holds break the upload's sizes ("" when they do not):
// an upload of a known size has it, in parts of its chunk size but the last; any upload
// stays within this server's maximum upload size.
func (c *Core) sizeRule(u *staging.Upload, held []s3store.ListedPart) string {
	var total int64
	for i, p := range held {
		total += p.Size
		if u.ExpectedSize >= 0 && i < len(held)-1 && p.Size != u.ChunkSize {
			return fmt.Sprintf("part %d has %d bytes: every part but the last must have the upload's chunk size, %d", p.N, p.Size, u.ChunkSize)
		}
	}
	switch limit := c.cfg.UploadLimit(); {
	case u.ExpectedSize >= 0 && total != u.ExpectedSize:
		return fmt.Sprintf("the parts hold %d bytes, but the upload was created for %d", total, u.ExpectedSize)
	case total > limit:
		return fmt.Sprintf("the parts hold %d bytes, more than this server's maximum upload size of %d bytes", total, limit)
	}
	return ""
}

// matchParts checks the parts S3 holds against those reported, and returns each part's
// CRC32C where S3 keeps one (or, for a checksummed multipart upload, the client's), or
// why they do not match.
func matchParts(reported []ReportedPart, held []s3store.ListedPart, checksummed bool) ([]s3store.ListedPart, []*uint32, string) {
	want := make(map[uint32]string, len(reported))
	for _, r := range reported {
		want[r.N] = r.ETag
	}
	byN := make(map[uint32]s3store.ListedPart, len(held))
	for _, p := range held {
		// A store may list a part put twice twice (SeaweedFS): the one with the
		// reported ETag is the one meant.
		if prev, ok := byN[p.N]; !ok || !s3store.SameETag(prev.ETag, want[p.N]) {
			byN[p.N] = p
		}
	}
	sums := make([]*uint32, len(reported))
	chosen := make([]s3store.ListedPart, len(reported))
	for i, r := range reported {
		h, ok := byN[r.N]
		chosen[i] = h
		switch {
		case !ok:
			return nil, nil, fmt.Sprintf("part %d was reported, but S3 does not hold it", r.N)
		case !s3store.SameETag(h.ETag, r.ETag):
			return nil, nil, fmt.Sprintf("part %d was reported with ETag %s, but S3 holds it with %s: the part was replaced, or the report is wrong", r.N, r.ETag, h.ETag)
		case r.Size > 0 && r.Size != h.Size:
			return nil, nil, fmt.Sprintf("part %d was reported with %d bytes, but S3 holds %d", r.N, r.Size, h.Size)
		case i < len(reported)-1 && h.Size < MinPartSize:
			return nil, nil, fmt.Sprintf("part %d has %d bytes: every part but the last must have at least 5 MiB (S3's rule)", r.N, h.Size)
		}
		if h.CRC32C != "" {
			sum, err := ParseCRCHeader(h.CRC32C)
			if err != nil {
				return nil, nil, fmt.Sprintf("part %d: S3 gave an unreadable CRC32C %q", r.N, h.CRC32C)
			}
			if r.CRC32C != nil && *r.CRC32C != sum {
				return nil, nil, fmt.Sprintf("part %d was reported with CRC32C %08x, but S3 holds bytes with %08x", r.N, *r.CRC32C, sum)
			}
			sums[i] = &sum
		} else if r.CRC32C != nil && checksummed {
			// S3 took the part only with a CRC32C it checked, and checks the whole
			// object's, combined from these, at completion; a store that does not list
			// the parts' (SeaweedFS) still checks it there.
			sums[i] = r.CRC32C
		}
		// Otherwise a CRC32C only the client gives is not S3's word on the bytes: the
		// part stays without one, and the completer reads the object for its CRC32C.
		delete(byN, r.N)
	}
	if len(byN) > 0 {
		extra := make([]uint32, 0, len(byN))
		for n := range byN {
			extra = append(extra, n)
		}
		slices.Sort(extra)
		return nil, nil, fmt.Sprintf("S3 holds part %d, which was not reported", extra[0])
	}
	return chosen, sums, ""
}

// failDirect fails direct upload u for why (its multipart upload is aborted as it ends)
// and returns the error saying so.
func (c *Core) failDirect(ctx context.Context, u *staging.Upload, why string) error {
	err := c.ender.FailUnrecorded(ctx, u.ID, why)
	if errors.Is(err, uploads.ErrPartsRecorded) || errors.Is(err, staging.ErrCompleting) {
		// A completion at the same time reported what S3 holds, recorded it and
		// completes the upload: this report was not the parts', but the upload is.
		return fault.Wrap(err, fault.Conflict, fmt.Sprintf("upload %s is being completed by another completion, whose parts matched what S3 holds (this one's did not: %s): read it with GetUpload", u.ID, why))
	}
	var se *staging.StateError
	if errors.As(err, &se) && holdsAll(se.Status) {
		// Completed meanwhile by another completion (whose S3 completion is why the
		// listing found nothing): say so rather than report a failure.
		return fault.Wrap(se, fault.Conflict, fmt.Sprintf("upload %s is %s already: read it with GetUpload", u.ID, se.Status))
	}
	if err != nil && !errors.As(err, &se) {
		return err
	}
	return &MismatchError{Reason: fmt.Sprintf("upload %s failed: %s; nothing was written, and it takes no more parts: create a new upload to send the file again", u.ID, why)}
}

// ParseCRCHeader reads an x-amz-checksum-crc32c value (base64 of 4 big-endian bytes).
func ParseCRCHeader(v string) (uint32, error) {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil || len(b) != 4 {
		return 0, fmt.Errorf("not a CRC32C: %q", v)
	}
	return binary.BigEndian.Uint32(b), nil
}
