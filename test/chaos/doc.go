// Package chaos is chunkup's fault-injection suite: real chunkup processes (built from
// cmd/chunkup) against a real redis-server, a real MinIO and a Kafka broker (kfake),
// with real faults injected while uploads run:
//
//   - kill -9 of the API server mid-stream (the SDK resumes against a restarted server
//     without re-sending an acknowledged chunk);
//   - kill -9 of a worker process holding chunk leases;
//   - kill -9 of a completer mid-completion, before and after S3 completed the object;
//   - Redis restarted (with AOF) mid-upload;
//   - MinIO stopped for 20 s mid-upload;
//   - the Kafka broker stopped while uploads complete;
//
// and, beyond those, faults where a process stays alive but its S3 hangs (a paused TCP
// proxy): a completer stalled past its guard's lease, and a worker stalled while it
// holds chunk leases.
//
// After each fault the suite checks the invariants of the design brief: every
// acknowledged upload's object is byte-identical to its input, every completion has its
// UploadCompleted event with one stable event id, nothing is left stuck (no leases, no
// pending chunks, no due completions, no outbox), and no multipart upload is left open.
// Each test logs what it injected ("INJECT") and what it checked ("CHECK").
//
// The tests need the build tag chaos, so `go test ./...` (and `make test`) does not run
// them; `make chaos` does:
//
//	go test -race -tags chaos -timeout 20m -v ./test/chaos/
//
// They build cmd/chunkup from the tree; CHUNKUP_CHAOS_BIN=/path/to/chunkup tests that
// binary instead.
package chaos
