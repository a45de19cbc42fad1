package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
)

// nodeRun is the line testdata/grpc-upload.cjs prints.
type nodeRun struct {
	Error                string   `json:"error"`
	Code                 string   `json:"code"`
	UploadID             string   `json:"upload_id"`
	CreatedState         string   `json:"created_state"`
	FirstAcks            []uint32 `json:"first_acks"`
	ReceivedBeforeResume []uint32 `json:"received_before_resume"`
	ResumedAcks          []uint32 `json:"resumed_acks"`
	WrongCRC             string   `json:"wrong_crc"`
	Watched              string   `json:"watched"`
	ReadOK               bool     `json:"read_ok"`
	BytesEqual           bool     `json:"bytes_equal"`
	State                string   `json:"state"`
	CRC32CEqual          bool     `json:"crc32c_equal"`
}

// TestGRPCClientFromProtoAlone drives chunkup with a client written in another language
// from upload.proto alone (Node, @grpc/grpc-js, @grpc/proto-loader: no SDK): create in
// the first message, an interrupted stream, resume from GetUpload's received_chunks, a
// wrong crc32c, WatchUpload to COMPLETED and ReadObject. What the proto promises has to
// hold for such a client, not only for the Go SDK.
func TestGRPCClientFromProtoAlone(t *testing.T) {
	e := newEnv(t)
	a := e.start(t, e.config())
	data := randomBytes(2*chunk+12345, 71)
	file := filepath.Join(t.TempDir(), "input.bin")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	protoDir, err := filepath.Abs(filepath.Join("..", "..", "proto"))
	if err != nil {
		t.Fatal(err)
	}
	out := runNode(t, "grpc-upload.cjs", []string{
		"CHUNKUP_ADDR=" + a.GRPCAddr(), "CHUNKUP_FILE=" + file, "CHUNKUP_PROTO=" + protoDir,
		"CHUNKUP_CHUNK=" + strconv.Itoa(chunk),
	}, nil, false)
	var got nodeRun
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("grpc-upload.cjs printed %q: %v", out, err)
	}
	if got.Error != "" {
		t.Fatalf("the Node client failed: %s (%s)", got.Error, got.Code)
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"created ACTIVE", got.CreatedState == "UPLOAD_STATE_ACTIVE"},
		{"chunks 1 and 2 acknowledged on the first stream", slices.Equal(got.FirstAcks, []uint32{1, 2})},
		{"GetUpload lists chunks 1 and 2", slices.Equal(got.ReceivedBeforeResume, []uint32{1, 2})},
		{"only chunk 3 sent on resume, and acknowledged", slices.Equal(got.ResumedAcks, []uint32{3})},
		{"a wrong crc32c is DATA_LOSS", got.WrongCRC == "DATA_LOSS"},
		{"WatchUpload ends COMPLETED", got.Watched == "UPLOAD_STATE_COMPLETED"},
		{"ReadObject's offsets and CRC32Cs", got.ReadOK},
		{"the object read back is the input", got.BytesEqual},
		{"COMPLETED, with the input's CRC32C", got.State == "UPLOAD_STATE_COMPLETED" && got.CRC32CEqual},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no (the client saw %+v)", c.what, got)
		}
	}
	e.requireExact(t, getUpload(t, e.client(t, a), got.UploadID), data)
}
