package upload

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chunkup/chunkup/internal/fault"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
)

// Object is a stored object as the caller may see it. Keys are whole keys, as
// Upload.Key gives them (under the tenant's prefix, when there is one).
type Object struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
	// Known from a stat only, not from a listing.
	ContentType string
	CRC32C      uint32
	HasCRC32C   bool
	UploadID    string
}

// Listing bounds: a page has at most maxListPage objects (S3's own page), and
// defaultListPage when the caller does not say.
const defaultListPage, maxListPage = 1000, 1000

// ObjectNotFoundError means there is no object at a key, or none the caller may see.
type ObjectNotFoundError struct{ Key string }

func (e *ObjectNotFoundError) Error() string {
	return fmt.Sprintf("object %s not found: it may not exist, or be another tenant's; list the objects (ListObjects) to see which keys exist", Quote(e.Key))
}

// Kind implements fault's kinded errors.
func (e *ObjectNotFoundError) Kind() fault.Kind { return fault.NotFound }

// errNoObjects: this server runs without S3.
var errNoObjects = fault.New(fault.Unsupported, "this server cannot reach the objects: it runs without S3")

// tenantPrefix is where the tenant of ctx keeps its objects; "" for the tenant of a
// server without authentication, which sees the whole bucket.
func tenantPrefix(ctx context.Context) string {
	if t := TenantFrom(ctx); t != "" {
		return t + "/"
	}
	return ""
}

// visible checks that key can be a key and is the caller's to see. Beyond what S3
// itself requires, only dot segments are refused (not ValidateKey's other rules for the
// keys of new uploads): a listing returns whatever keys the bucket holds, and each must
// be one a caller can stat and delete, but for a key with a dot segment, which no
// upload has and which only another writer can have put there.
func visible(ctx context.Context, key string) error {
	switch {
	case key == "":
		return invalidf("key is empty: name the object by its whole key, as a listing gives it")
	case len(key) > maxKeyLen:
		return invalidf("key has %d bytes; keys have at most %d", len(key), maxKeyLen)
	case !utf8.ValidString(key):
		return invalidf("key is not UTF-8")
	}
	if !strings.HasPrefix(key, tenantPrefix(ctx)) {
		return &ObjectNotFoundError{Key: key} // another tenant's keys are not there for it
	}
	if dotSegment(key) {
		return invalidf("key %s has a '.' or '..' segment, which stores read differently (S3 keeps it, MinIO refuses it, a path normalizer resolves it to another key): no upload's key has one, and chunkup neither reads nor deletes such a key (an object another writer put there is for S3's own tools)", Quote(key))
	}
	return nil
}

// dotSegment says whether key, or a listing's prefix, has a '.' or '..' segment (a
// prefix's last one included: stores refuse it too). S3 takes such keys literally, but
// stores and proxies differ, so a tenant's "t/../u/k" must never reach one; no key
// chunkup makes has them (ValidateKey). Empty segments lead nowhere else, and keys with
// them that other writers made stay reachable.
func dotSegment(key string) bool {
	for s := range strings.SplitSeq(key, "/") {
		if s == "." || s == ".." {
			return true
		}
	}
	return false
}

// ListObjects lists, a page at a time in key order, the caller's objects whose keys
// begin with prefix (all of them for ""). pageToken is "" for the first page, then the
// next one a page returned; "" after the last page. A prefix outside the caller's
// objects lists nothing.
func (c *Core) ListObjects(ctx context.Context, prefix, pageToken string, pageSize int) ([]Object, string, error) {
	if c.objects == nil {
		return nil, "", errNoObjects
	}
	switch {
	case pageSize < 0 || pageSize > maxListPage:
		return nil, "", invalidf("page_size %d is outside 0 to %d (0: %d)", pageSize, maxListPage, defaultListPage)
	case pageSize == 0:
		pageSize = defaultListPage
	}
	if len(prefix) > maxKeyLen {
		return nil, "", invalidf("prefix has %d bytes; keys have at most %d", len(prefix), maxKeyLen)
	}
	after, err := base64.RawURLEncoding.DecodeString(pageToken)
	if err != nil {
		return nil, "", invalidf("page_token is not one a listing returned: pass the next_page_token of the previous page, or none for the first")
	}
	own := tenantPrefix(ctx)
	switch {
	case strings.HasPrefix(prefix, own):
		if dotSegment(prefix) {
			return nil, "", invalidf("prefix %s has a '.' or '..' segment, which no upload's key has (and stores refuse): leave the segment out", Quote(prefix))
		}
	case strings.HasPrefix(own, prefix):
		prefix = own // a prefix of the tenant's own prefix: all of the tenant's objects
	default:
		return nil, "", nil // none of the caller's keys begins with it
	}
	if len(after) > 0 && !strings.HasPrefix(string(after), prefix) {
		return nil, "", invalidf("page_token belongs to a listing of another prefix: start again without it")
	}
	listed, more, err := c.objects.List(ctx, c.cfg.Bucket, prefix, string(after), pageSize)
	if err != nil {
		return nil, "", objectErr(err)
	}
	objs := make([]Object, len(listed))
	for i, o := range listed {
		objs[i] = Object{Key: o.Key, Size: o.Size, ETag: o.ETag, LastModified: o.LastModified}
	}
	next := ""
	if more && len(objs) > 0 {
		next = base64.RawURLEncoding.EncodeToString([]byte(objs[len(objs)-1].Key))
	}
	return objs, next, nil
}

// StatObject describes the caller's object at key.
func (c *Core) StatObject(ctx context.Context, key string) (Object, error) {
	if c.objects == nil {
		return Object{}, errNoObjects
	}
	if err := visible(ctx, key); err != nil {
		return Object{}, err
	}
	info, err := c.objects.Head(ctx, c.cfg.Bucket, key)
	switch {
	case s3store.NotFound(err):
		return Object{}, &ObjectNotFoundError{Key: key}
	case err != nil:
		return Object{}, objectErr(err)
	}
	o := Object{Key: key, Size: info.Size, ETag: info.ETag, LastModified: info.LastModified, ContentType: info.ContentType,
		CRC32C: info.CRC32C, HasCRC32C: info.HasCRC32C, UploadID: info.UploadID}
	if !o.HasCRC32C && o.UploadID != "" {
		// A store that keeps no checksums (or an object completed without one): the
		// upload that wrote it knows its CRC32C while chunkup still keeps its record, and
		// the same ETag says the object is still the one it wrote.
		if up, err := c.get(ctx, o.UploadID); err == nil && up.Status == staging.StatusCompleted && up.ETag == o.ETag && up.Key == key {
			o.CRC32C, o.HasCRC32C = up.CRC32C, true
		}
	}
	return o, nil
}

// DeleteObject deletes the caller's object at key. With ifMatch, only if the object has
// that ETag when the core looks just before deleting (another ETag: a
// *PreconditionError, nothing deleted); an object written over it between that look and
// the delete is deleted too, since not every S3 store takes a condition on DeleteObject.
// No object there is an *ObjectNotFoundError.
func (c *Core) DeleteObject(ctx context.Context, key, ifMatch string) error {
	obj, err := c.StatObject(ctx, key)
	if err != nil {
		return err
	}
	if ifMatch != "" && strings.Trim(ifMatch, `"`) != strings.Trim(obj.ETag, `"`) {
		return &PreconditionError{Msg: fmt.Sprintf("the object at key %s has ETag %s, not %s: nothing was deleted; stat it again to see what it is now", Quote(key), obj.ETag, Quote(ifMatch))}
	}
	if err := c.objects.Delete(ctx, c.cfg.Bucket, key); err != nil {
		return objectErr(err)
	}
	return nil
}

// objectErr is an S3 error of an object call as the caller sees it: one that retrying
// will not help (access denied, no such bucket) is the server's fault, with S3's words;
// any other is Unavailable, to be retried.
func objectErr(err error) error {
	if s3store.Permanent(err) {
		return fault.Wrap(err, fault.Internal, "S3 refused the object call: "+s3store.Reason(err))
	}
	return fmt.Errorf("%w: %w", staging.ErrUnavailable, err)
}

// PreconditionError is a request whose condition does not hold; nothing was changed.
type PreconditionError struct{ Msg string }

func (e *PreconditionError) Error() string { return e.Msg }

// Kind implements fault's kinded errors.
func (e *PreconditionError) Kind() fault.Kind { return fault.Conflict }
