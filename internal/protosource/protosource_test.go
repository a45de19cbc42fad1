package protosource_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"

	_ "github.com/chunkup/chunkup/gen/chunkup/v1" // the descriptors the server implements
	"github.com/chunkup/chunkup/internal/protosource"
)

// TestSameAPIAsGenerated: the commented descriptors reflection serves describe the API
// the generated code implements, comments apart (check-generate keeps both current;
// this catches one regenerated without the other), and carry the comments.
func TestSameAPIAsGenerated(t *testing.T) {
	r, err := protosource.New()
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"chunkup/v1/upload.proto", "chunkup/v1/document.proto", "chunkup/v1/events.proto"} {
		own, err := r.FindFileByPath(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		gen, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			t.Fatalf("%s in the generated code: %v", path, err)
		}
		a, b := protodesc.ToFileDescriptorProto(own), protodesc.ToFileDescriptorProto(gen)
		if a.GetSourceCodeInfo().GetLocation() == nil {
			t.Errorf("%s: served without comments", path)
		}
		a.SourceCodeInfo, b.SourceCodeInfo = nil, nil
		if !proto.Equal(a, b) {
			t.Errorf("%s differs from the generated code's: run make generate", path)
		}
	}
}
