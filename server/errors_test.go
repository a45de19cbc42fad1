package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/internal/retry"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/upload"
)

func TestToStatus(t *testing.T) {
	const id = "abcdefghijklmnopqrstuvwxyz"
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		want []string // parts of the message
		// namesID: the message names the upload.
		namesID bool
	}{
		{"not found", staging.ErrNotFound, codes.NotFound, []string{"not found", "create an upload first"}, true},
		{"completed", &staging.StateError{Status: staging.StatusCompleted}, codes.FailedPrecondition, []string{"COMPLETED", "accepts no more chunks"}, true},
		{"aborted", &staging.StateError{Status: staging.StatusAborted}, codes.FailedPrecondition, []string{"ABORTED"}, true},
		{"beyond the last chunk", &staging.OutOfRangeError{N: 5, Total: 3}, codes.OutOfRange, []string{"chunk 5", "last chunk is 3"}, true},
		{"second last chunk", &staging.LastChunkError{N: 2, Last: 4}, codes.FailedPrecondition, []string{"chunk 2 cannot be the last", "chunk 4 already is", "exactly one last chunk"}, true},
		{"last before a received chunk", &staging.LastChunkError{N: 2, Max: 7}, codes.FailedPrecondition, []string{"chunk 7 was already received"}, true},
		{"part recorded with other bytes", &staging.PartRecordedError{N: 3}, codes.FailedPrecondition, []string{"chunk 3", "start a new upload"}, true},
		{"chunk busy", staging.ErrChunkBusy, codes.Aborted, []string{"being uploaded", "retry"}, true},
		{"completing", staging.ErrCompleting, codes.FailedPrecondition, []string{"being completed", "can no longer be aborted"}, true},
		{"invalid", &upload.InvalidError{Msg: "chunk_number must be at least 1"}, codes.InvalidArgument, []string{"chunk_number must be at least 1"}, true},
		{"range", &upload.RangeError{Msg: "chunk 10001 is beyond S3's limit"}, codes.OutOfRange, []string{"chunk 10001"}, true},
		{"checksum", &upload.ChecksumError{N: 2, Got: 0xdeadbeef, Want: 0x01020304}, codes.DataLoss, []string{"chunk 2", "deadbeef", "01020304", "send it again"}, true},
		{"canceled", context.Canceled, codes.Canceled, nil, false},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, nil, false},
		{"redis unavailable", fmt.Errorf("%w: %w", staging.ErrUnavailable, io.EOF), codes.Unavailable, []string{"staging store unavailable", "retry later"}, true},
		{"redis full", fmt.Errorf("%w: OOM command not allowed", staging.ErrFull), codes.ResourceExhausted, []string{"maxmemory", "nothing was changed", "retry"}, true},
		{"long id", staging.ErrNotFound, codes.NotFound, []string{"bytes)"}, false},
		{"anything else", errors.New("boom"), codes.Internal, []string{"boom"}, true},
		{"not an admin", &PermissionError{Msg: "tenant \"acme\" is not an admin tenant"}, codes.PermissionDenied, []string{"not an admin tenant"}, false},
		{"ocr off", errNoOCR, codes.FailedPrecondition, []string{"OCR is not enabled"}, false},
		{"result unreachable", &ResultError{Key: "k.ocr.json", Err: io.ErrUnexpectedEOF}, codes.Unavailable, []string{"k.ocr.json", "retry later"}, true},
		{"result missing", &ResultError{Key: "k.ocr.json", Err: &retry.PermanentError{Err: errors.New("NoSuchKey")}}, codes.FailedPrecondition, []string{"k.ocr.json", "reprocess"}, true},
		{"job not dead", &JobError{JobID: "j1", Requeued: 2, Err: ocrqueue.ErrJobNotFound}, codes.NotFound, []string{"j1", "not dead-lettered", "2 requeued"}, false},
	} {
		for _, wrapped := range []bool{false, true} {
			err := tc.err
			name := tc.name
			if wrapped {
				err = fmt.Errorf("stage chunk: %w", err)
				name += "/wrapped"
			}
			t.Run(name, func(t *testing.T) {
				id := id
				if tc.name == "long id" {
					id = strings.Repeat("x", 10_000)
				}
				got := toStatus(id, err)
				s, ok := status.FromError(got)
				if !ok {
					t.Fatalf("toStatus(%v) = %T %v, not a gRPC status", err, got, got)
				}
				if s.Code() != tc.code {
					t.Fatalf("toStatus(%v) = %v %q, want %v", err, s.Code(), s.Message(), tc.code)
				}
				for _, w := range tc.want {
					if !strings.Contains(s.Message(), w) {
						t.Errorf("message %q does not contain %q", s.Message(), w)
					}
				}
				if tc.namesID && !strings.Contains(s.Message(), id) {
					t.Errorf("message %q does not name upload %s", s.Message(), id)
				}
				if len(s.Message()) > 400 {
					t.Errorf("message has %d bytes; caller input must be quoted briefly", len(s.Message()))
				}
			})
		}
	}
}

func TestToStatusPassesThrough(t *testing.T) {
	if err := toStatus("x", nil); err != nil {
		t.Fatalf("toStatus(nil) = %v", err)
	}
	in := status.Error(codes.ResourceExhausted, "slow down")
	if got := toStatus("x", in); got != in {
		t.Fatalf("toStatus(status) = %v, want the same status", got)
	}
	// Rules are tried in order: an error that matches two gets the first one.
	both := errors.Join(&upload.ChecksumError{N: 1}, staging.ErrNotFound)
	if got := status.Code(toStatus("x", both)); got != codes.DataLoss {
		t.Fatalf("toStatus(checksum+notfound) = %v, want DataLoss", got)
	}
}
