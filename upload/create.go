package upload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"time"

	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/staging"
)

// CreateRequest describes an upload to create, whatever door it came through.
type CreateRequest struct {
	// Size is the upload's length in bytes, or -1 when it is not known yet.
	Size int64
	// ChunkSize is the chunk size the client proposes; 0 lets the core choose.
	ChunkSize int64
	// Key is the object key the client chose ("" for the key template's or the
	// default one); it goes under the tenant's prefix.
	Key string
	// Name and ContentType describe the file; Metadata is the client's own.
	Name, ContentType string
	Metadata          map[string]string
	// ClientNodeID makes the create idempotent: a repeat gets the same upload back.
	ClientNodeID string
	// The document's identity and place: NodeID is its UUID ("" to have one made).
	NodeID, ConnectorID, ParentID, Path, Drive string
	// CustomMetadata is a JSON object ("" for none), checked by the door that decoded it.
	CustomMetadata string
	// IfAbsent: the object must not replace one at its key.
	IfAbsent bool
	// CorrelationID ties the upload to the caller's request; "" takes the context's
	// (WithCorrelationID), or has one made.
	CorrelationID string
	// Partial: a part of a later upload (tus concatenation): its object goes to a key of
	// its own (not Key's, nor the template's), and its completion announces nothing.
	Partial bool
	// Concat names the partial uploads a final upload concatenates, in order (see
	// Partials); the door appends their bytes (OpenPartials).
	Concat []string
	// EitherKind: the client takes a direct upload or one through a door, whichever
	// the server makes (direct_if_offered), so a create repeated under the same
	// ClientNodeID gets its upload back whichever kind it is: a server with another
	// offer (another --direct-above, or one before a restart) may have made it.
	EitherKind bool

	// direct: the client puts the parts into S3 itself (CreateDirect), with their
	// CRC32C when directChecksums.
	direct, directChecksums bool
}

// Plan validates create request req and returns the parameters the upload it makes
// will have (Tenant unset): what a chunk sent with the create is checked against before
// anything is created.
func (c *Core) Plan(req *CreateRequest) (staging.Params, error) {
	p, err := c.plan(req)
	return p, Explain("", err)
}

func (c *Core) plan(req *CreateRequest) (staging.Params, error) {
	if err := req.Validate(); err != nil {
		return staging.Params{}, err
	}
	expected := req.Size
	if c.cfg.MaxUploadSize > 0 && expected > c.cfg.MaxUploadSize {
		return staging.Params{}, &TooLargeError{Msg: fmt.Sprintf("expected_size %d exceeds this server's maximum upload size of %d bytes", expected, c.cfg.MaxUploadSize)}
	}
	var chunkSize int64
	var err error
	if req.ChunkSize > 0 {
		chunkSize, err = AcceptChunkSize(req.ChunkSize, expected, c.cfg.MaxChunkSize)
	} else {
		chunkSize, err = ChunkSizeFor(expected, c.cfg.ChunkSize, c.cfg.MaxChunkSize)
	}
	if err != nil {
		return staging.Params{}, err
	}
	p := staging.Params{ChunkSize: chunkSize, ExpectedSize: expected}
	if expected >= 0 {
		p.Total = staging.TotalChunks(expected, chunkSize)
	}
	return p, nil
}

// Create creates an upload for the caller's tenant and returns it as stored. A create
// repeated with the same ClientNodeID gets the same upload back; one that differs in a
// parameter is an Exists error naming it.
func (c *Core) Create(ctx context.Context, req *CreateRequest) (*staging.Upload, error) {
	p, err := c.plan(req)
	if err != nil {
		return nil, Explain("", err)
	}
	return c.CreatePlanned(ctx, req, p)
}

// CreatePlanned is Create for a request Plan validated and planned as p.
func (c *Core) CreatePlanned(ctx context.Context, req *CreateRequest, p staging.Params) (*staging.Upload, error) {
	up, err := c.create(ctx, req, p)
	return up, Explain("", err)
}

func (c *Core) create(ctx context.Context, req *CreateRequest, p staging.Params) (*staging.Upload, error) {
	expected, chunkSize := p.ExpectedSize, p.ChunkSize
	tenant := TenantFrom(ctx)
	id := ids.New()
	nodeID, given := ids.UUID(req.NodeID) // checked by Validate
	if !given {
		nodeID = ids.NewUUID()
	}
	// The key is made before anything is written, so that a key template this request
	// cannot fill refuses it with nothing changed. Only the upload id and a generated
	// node id can change below, and neither can make a key invalid.
	key, err := c.keyFor(tenant, id, nodeID, req)
	if err != nil {
		return nil, err
	}
	if req.IfAbsent && !req.Partial {
		if err := c.keyFree(ctx, key, req.ClientNodeID); err != nil {
			return nil, err
		}
	}
	if c.creates != nil && !c.creates.allow(tenant) {
		return nil, &CapError{Msg: fmt.Sprintf("tenant %s is creating uploads faster than the %g per second this server allows; nothing was created: slow down and retry", Quote(tenant), c.cfg.CreateRatePerTenant), Delay: time.Second}
	}
	at := c.store.Now()
	bound, err := c.store.Reserve(ctx, tenant, req.ClientNodeID, id, at)
	if err != nil {
		return nil, err
	}
	fresh := bound == id
	if !fresh {
		// A repeated create: the upload it names keeps the node id it was given
		// (and the key made from it).
		id = bound
		switch prev, err := c.get(ctx, id); {
		case err == nil && !given:
			nodeID = prev.NodeID
		case err != nil && !errors.Is(err, staging.ErrNotFound):
			return nil, err
		}
		if key, err = c.keyFor(tenant, id, nodeID, req); err != nil {
			return nil, err
		}
	}
	corr := req.CorrelationID
	if corr == "" {
		corr = CorrelationIDFrom(ctx)
	}
	if corr == "" {
		corr = ids.New()
	}
	doc := staging.Document{NodeID: nodeID, ConnectorID: req.ConnectorID, ParentID: req.ParentID, Path: req.Path, Drive: req.Drive,
		CustomMetadata: req.CustomMetadata}
	nu := staging.NewUpload{
		ID: id, Bucket: c.cfg.Bucket, Key: key,
		ChunkSize: chunkSize, ExpectedSize: expected, InstanceID: c.cfg.InstanceID, Name: req.Name,
		ContentType: req.ContentType, ClientNodeID: req.ClientNodeID, Metadata: req.Metadata,
		CorrelationID: corr, Tenant: tenant, Document: doc, At: at,
		IfAbsent: req.IfAbsent && !req.Partial, Partial: req.Partial, Concat: req.Concat,
	}
	if expected >= 0 {
		nu.Total = staging.TotalChunks(expected, chunkSize)
	}
	if req.direct {
		if err := c.createMultipart(ctx, &nu, req.directChecksums); err != nil {
			return nil, err
		}
	}
	var created bool
	if fresh {
		// With its node index, which is written once the upload exists (a reader that
		// finds it finds the upload).
		created, err = c.store.CreateReserved(ctx, nu)
	} else {
		// An id bound by an attempt that may have died before creating it.
		created, err = c.store.Create(ctx, nu)
	}
	if req.direct && (err != nil || !created) {
		// The record names another multipart upload, or none: this one is a stray.
		if aerr := c.direct.Abort(context.WithoutCancel(ctx), nu.Bucket, nu.Key, nu.MultipartID); aerr != nil {
			c.cfg.Logger.Warn("abort a direct upload's unused multipart upload", "upload_id", id, "err", aerr)
		}
	}
	if err != nil {
		return nil, err
	}
	if created {
		if c.metrics != nil {
			c.metrics.UploadCreated()
		}
		up := nu.Created() // what was just stored: no need to read it back
		if !fresh {
			if err := c.store.IndexNode(ctx, tenant, up.NodeID, id, up.Created, c.store.NodeTTL()); err != nil {
				return nil, err
			}
		}
		return up, nil
	}
	up, err := c.get(ctx, id)
	if err != nil {
		return nil, err
	}
	// The client_node_id names an upload already: the same request again gets it back;
	// another request under the same id is refused, not silently merged.
	if field := differingField(up, nu, req, given); field != "" {
		return nil, &ConflictError{ClientNodeID: req.ClientNodeID, UploadID: id, Field: field}
	}
	// A create repeated after a crash before the node index was written writes it now
	// (the document's creation writes it again).
	if err := c.store.IndexNode(ctx, tenant, up.NodeID, id, up.Created, c.store.NodeTTL()); err != nil {
		return nil, err
	}
	return up, nil
}

// keyFor is the object key of a new upload: the client's, else the key template's, else
// the default; under the tenant's prefix.
func (c *Core) keyFor(tenant, id, nodeID string, req *CreateRequest) (string, error) {
	if req.Partial {
		return KeyFor(tenant, "", id, partialKey(c.cfg.KeyPrefix, id), ""), nil
	}
	clientKey := req.Key
	if clientKey == "" && c.keys != nil {
		var err error
		clientKey, err = c.keys.Expand(KeyFields{UploadID: id, NodeID: nodeID, ConnectorID: req.ConnectorID, Name: req.Name, Tenant: tenant})
		if err != nil {
			return "", err
		}
	}
	key := KeyFor(tenant, c.cfg.KeyPrefix, id, clientKey, req.Name)
	if len(key) > maxKeyLen {
		return "", invalidf("key has %d bytes with the tenant's prefix; at most %d are allowed", len(key), maxKeyLen)
	}
	return key, nil
}

// keyFree checks, for a create with if_absent, that no object is at key: one there is an
// *ObjectExistsError, unless it is the object of the upload that clientNodeID names (a
// create repeated after its upload stored the object gets that upload back).
func (c *Core) keyFree(ctx context.Context, key, clientNodeID string) error {
	if c.objects == nil {
		return nil // no S3 here: the conditional write still refuses to replace it
	}
	info, err := c.objects.Head(ctx, c.cfg.Bucket, key)
	switch {
	case s3store.NotFound(err):
		return nil
	case err != nil:
		return err
	}
	if clientNodeID != "" && info.UploadID != "" {
		if up, err := c.get(ctx, info.UploadID); err == nil && up.ClientNodeID == clientNodeID {
			return nil
		}
	}
	return &ObjectExistsError{Key: key}
}

// differingField names the first parameter in which a repeated create differs from the
// upload its client_node_id names, or returns "".
func differingField(up *staging.Upload, nu staging.NewUpload, req *CreateRequest, nodeGiven bool) string {
	switch {
	case nodeGiven && up.NodeID != nu.NodeID:
		return "node_id"
	case req.Key != "" && up.Key != nu.Key:
		return "key"
	case up.ExpectedSize != nu.ExpectedSize:
		return "expected_size"
	case up.Name != nu.Name:
		return "name"
	case up.ContentType != nu.ContentType:
		return "content_type"
	case !maps.Equal(up.Metadata, nu.Metadata):
		return "metadata"
	case req.ChunkSize != 0 && up.ChunkSize != req.ChunkSize:
		return "chunk_size"
	case up.ConnectorID != nu.ConnectorID:
		return "connector_id"
	case up.ParentID != nu.ParentID:
		return "parent_id"
	case up.Path != nu.Path:
		return "path"
	case up.Drive != nu.Drive:
		return "drive"
	case !sameJSON(up.CustomMetadata, nu.CustomMetadata):
		return "custom_metadata"
	case up.IfAbsent != nu.IfAbsent:
		return "if_absent"
	case up.Direct != nu.Direct && !req.EitherKind:
		return "direct"
	case up.Key != nu.Key:
		// A key the server made, from fields that are all the same (its key template
		// changed since): the request cannot get that upload back.
		return "key"
	}
	return ""
}

// sameJSON reports whether two stored custom_metadata objects are equal as values
// (the key order of their encodings is not stable).
func sameJSON(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	return reflect.DeepEqual(x, y)
}

// ValidID checks that id can name an upload (the core checks it in every call that
// takes one; a door checks it itself before it uses an id otherwise).
func ValidID(id string) error {
	if id == "" {
		return invalidf("upload_id is required: name the upload (CreateUpload returns its upload_id)")
	}
	if !ids.Valid(id) {
		return invalidf("upload_id %s is not a chunkup upload id (26 characters a-z, 2-7)", Quote(id))
	}
	return nil
}
