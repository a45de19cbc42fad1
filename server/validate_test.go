package server

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/upload"
)

// TestCustomMetadataChecked: what only protobuf can get wrong in custom_metadata (its
// nesting, its keys, values that JSON cannot hold) is refused by the door as invalid,
// before the core sees the request.
func TestCustomMetadataChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *chunkupv1.CreateUploadRequest
		msg  string // "" means valid; else part of the message
	}{
		{"custom metadata too deep", &chunkupv1.CreateUploadRequest{CustomMetadata: nested(t, upload.MaxMetadataDepth+1)}, "nested more than 8 levels"},
		{"custom metadata at the depth limit", &chunkupv1.CreateUploadRequest{CustomMetadata: nested(t, upload.MaxMetadataDepth)}, ""},
		{"custom metadata with an empty key", &chunkupv1.CreateUploadRequest{CustomMetadata: mustStruct(t, map[string]any{"": 1.0})}, "keys must be"},
		{"custom metadata with NaN", &chunkupv1.CreateUploadRequest{CustomMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"n": structpb.NewNumberValue(math.NaN())}}}, "not a finite number"},
		{"custom metadata with no value", &chunkupv1.CreateUploadRequest{CustomMetadata: &structpb.Struct{Fields: map[string]*structpb.Value{
			"v": {}}}}, "has no value"},
		{"custom metadata too big", &chunkupv1.CreateUploadRequest{CustomMetadata: mustStruct(t, map[string]any{"k": strings.Repeat("a", upload.MaxCustomMetadata)})}, "16384 are allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr, err := createRequest(context.Background(), tc.req)
			if err == nil {
				err = cr.Validate()
			}
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("create request: %v, want nil", err)
				}
				return
			}
			if inv := new(upload.InvalidError); !errors.As(err, &inv) {
				t.Fatalf("create request = %T %v, want *upload.InvalidError", err, err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q does not contain %q", err, tc.msg)
			}
		})
	}
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	st, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// nested is a Struct depth levels deep ({"a":{"a":...{"a":1}}}).
func nested(t *testing.T, depth int) *structpb.Struct {
	var v any = 1.0
	for range depth - 1 {
		v = map[string]any{"a": v}
	}
	return mustStruct(t, map[string]any{"a": v})
}
