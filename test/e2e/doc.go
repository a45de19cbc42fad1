// Package e2e holds chunkup's end-to-end tests: whole processes (the App of package app,
// in this test process or as the chunkup binary) against a real redis-server (also as a
// Redis Cluster) and a real MinIO started by internal/testenv, driven through the gRPC
// API by the Go client and by the raw generated stubs, with results checked in MinIO and
// Kafka themselves. The harness it shares with test/chaos is test/harness.
package e2e
