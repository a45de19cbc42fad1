package client

import "google.golang.org/protobuf/types/known/structpb"

// Document is an upload's document identity and place (see CreateUploadRequest).
type Document struct {
	// NodeID is the document's UUID; empty lets the server make a UUIDv4.
	NodeID                             string
	ConnectorID, ParentID, Path, Drive string
	// CustomMetadata is any JSON object (nested at most 8 levels, 16 KiB as JSON).
	CustomMetadata *structpb.Struct
}

// WithDocument sets the upload's document identity and place: the node id that names
// the document in events and DocumentService calls, where it comes from, and its custom
// metadata.
func WithDocument(d Document) UploadOption {
	return func(u *uploadConfig) {
		u.create.NodeId, u.create.ConnectorId, u.create.ParentId = d.NodeID, d.ConnectorID, d.ParentID
		u.create.Path, u.create.Drive, u.create.CustomMetadata = d.Path, d.Drive, d.CustomMetadata
	}
}
