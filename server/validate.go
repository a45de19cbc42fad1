package server

import (
	"fmt"
	"math"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chunkup/chunkup/upload"
)

// What the door checks itself: the values of custom_metadata, which only protobuf can
// get wrong (a NaN, a value with no kind); the core checks everything else of a
// request.

var (
	quote     = upload.Quote
	clip      = upload.Clip
	printable = upload.Printable
)

func invalidf(format string, a ...any) error {
	return &upload.InvalidError{Msg: fmt.Sprintf(format, a...)}
}

// validateStruct checks a Struct's keys and nesting (at depth, from 1).
func validateStruct(st *structpb.Struct, where string, depth int) error {
	if depth > upload.MaxMetadataDepth {
		return invalidf("%s is nested more than %d levels deep", where, upload.MaxMetadataDepth)
	}
	for k, v := range st.GetFields() {
		if k == "" || len(k) > upload.MaxPlaceField || !printable(k) {
			return invalidf("%s has a key %s: keys must be 1 to %d printable characters", where, quote(k), upload.MaxPlaceField)
		}
		if err := validateValue(v, where+"."+k, depth); err != nil {
			return err
		}
	}
	return nil
}

func validateValue(v *structpb.Value, where string, depth int) error {
	switch k := v.GetKind().(type) {
	case *structpb.Value_NumberValue:
		if math.IsNaN(k.NumberValue) || math.IsInf(k.NumberValue, 0) {
			return invalidf("%s is not a finite number (JSON has no NaN or infinity)", clip(where))
		}
	case *structpb.Value_StructValue:
		return validateStruct(k.StructValue, where, depth+1)
	case *structpb.Value_ListValue:
		if depth+1 > upload.MaxMetadataDepth {
			return invalidf("%s is nested more than %d levels deep", clip(where), upload.MaxMetadataDepth)
		}
		for _, e := range k.ListValue.GetValues() {
			if err := validateValue(e, where+"[]", depth+1); err != nil {
				return err
			}
		}
	case nil:
		return invalidf("%s has no value (use null_value for null)", clip(where))
	}
	return nil
}
