package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/events"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/ids"
	"github.com/chunkup/chunkup/staging/documents"
)

// DocumentStore is the part of the document store the document service uses.
type DocumentStore interface {
	Get(ctx context.Context, id string) (*documents.Document, error)
}

var _ DocumentStore = (*documents.Store)(nil)

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
	if !ids.Valid(id) {
		return nil, status.Errorf(codes.InvalidArgument, "document_id %s is not a document id: it is the upload id, 26 lowercase base32 characters", quote(id))
	}
	d, err := s.store.Get(ctx, id)
	if err != nil {
		return nil, toStatus(id, err)
	}
	if d.Tenant != TenantFrom(ctx) {
		// Another tenant's document does not exist for the caller.
		return nil, toStatus(id, documents.ErrNotFound)
	}
	return &chunkupv1.GetDocumentResponse{Document: events.DocumentProto(d)}, nil
}
