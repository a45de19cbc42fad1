// Package e2e holds chunkup's end-to-end tests: a whole process (internal/app) against a
// real redis-server and a real MinIO started by internal/testenv, driven through the
// gRPC API by the Go client, with results checked in MinIO itself.
package e2e
