package server

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

// TestReflectionServesComments: a client that knows the API only by reflection
// (grpcurl describe) gets the proto files' comments, over v1 and v1alpha.
func TestReflectionServesComments(t *testing.T) {
	gs := grpc.NewServer()
	chunkupv1.RegisterUploadServiceServer(gs, chunkupv1.UnimplementedUploadServiceServer{})
	registerReflection(gs, slog.New(slog.DiscardHandler))
	conn := Serve(t, gs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)

	const svcComment = "Each chunk is acknowledged once it is" // from upload.proto
	check := func(t *testing.T, files [][]byte) {
		t.Helper()
		var fd *descriptorpb.FileDescriptorProto
		for _, b := range files {
			f := new(descriptorpb.FileDescriptorProto)
			if err := proto.Unmarshal(b, f); err != nil {
				t.Fatal(err)
			}
			if f.GetName() == "chunkup/v1/upload.proto" {
				fd = f
			}
		}
		if fd == nil {
			t.Fatal("upload.proto not among the files served")
		}
		var svc string
		fields := 0
		for _, loc := range fd.GetSourceCodeInfo().GetLocation() {
			p := loc.GetPath()
			switch {
			case len(p) == 2 && p[0] == 6 && p[1] == 0: // service 0
				svc = loc.GetLeadingComments()
			case len(p) == 4 && p[0] == 4 && p[2] == 2 && loc.GetLeadingComments() != "": // a message's field
				fields++
			}
		}
		if !strings.Contains(svc, svcComment) {
			t.Errorf("UploadService's comment served: %q", svc)
		}
		if fields < 20 {
			t.Errorf("%d commented fields served, want the proto's (dozens)", fields)
		}
	}
	const symbol = "chunkup.v1.UploadService"
	t.Run("v1", func(t *testing.T) {
		s, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ask(s, &reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}})
		if err != nil {
			t.Fatal(err)
		}
		check(t, r.GetFileDescriptorResponse().GetFileDescriptorProto())
	})
	t.Run("v1alpha", func(t *testing.T) {
		s, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ask(s, &reflectionv1alpha.ServerReflectionRequest{MessageRequest: &reflectionv1alpha.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: symbol}})
		if err != nil {
			t.Fatal(err)
		}
		check(t, r.GetFileDescriptorResponse().GetFileDescriptorProto())
	})
}

// ask sends one request on a reflection stream and receives its answer.
func ask[Req, Resp any](s interface {
	Send(Req) error
	Recv() (Resp, error)
}, req Req) (Resp, error) {
	if err := s.Send(req); err != nil {
		var zero Resp
		return zero, err
	}
	return s.Recv()
}
