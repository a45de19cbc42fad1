package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/staging"
)

// DocumentStore is the part of the staging store the document service uses.
type DocumentStore interface {
	Document(ctx context.Context, id string) (*staging.Document, error)
}

var _ DocumentStore = (*staging.Store)(nil)

// DocumentService serves documents' OCR and review state.
type DocumentService struct {
	chunkupv1.UnimplementedDocumentServiceServer
	store DocumentStore
}

// NewDocumentService returns a DocumentService.
func NewDocumentService(store DocumentStore) *DocumentService { return &DocumentService{store: store} }

// RegisterDocumentService adds svc to gs (a server from NewGRPCServer), before it serves.
func RegisterDocumentService(gs *grpc.Server, svc *DocumentService) {
	chunkupv1.RegisterDocumentServiceServer(gs, svc)
}

// GetDocument returns a document.
func (s *DocumentService) GetDocument(ctx context.Context, req *chunkupv1.GetDocumentRequest) (*chunkupv1.GetDocumentResponse, error) {
	id := req.GetDocumentId()
	if !staging.ValidID(id) {
		return nil, status.Errorf(codes.InvalidArgument, "document_id %s is not a document id: it is the upload id, 26 lowercase base32 characters", quote(id))
	}
	d, err := s.store.Document(ctx, id)
	if err != nil {
		return nil, toStatus(id, err)
	}
	if d.Tenant != TenantFrom(ctx) {
		// Another tenant's document does not exist for the caller.
		return nil, toStatus(id, staging.ErrDocumentNotFound)
	}
	return &chunkupv1.GetDocumentResponse{Document: ocr.DocumentProto(d)}, nil
}
