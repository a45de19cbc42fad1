// Package layers holds the test that keeps chunkup's imports in the layers
// docs/architecture.md draws: the table under "## Layers" names which packages are in
// which layer, top to bottom, and the test reads it from there (the doc is the one
// source), places every package of the module in a layer, and fails naming the import
// when a package's own code imports one in a layer above it, or when imports go round
// in a cycle. Tests may import anything (an SDK test starts a whole server); the rule
// is about what a package links.
//
// It also checks two promises the layers alone do not make: the Go SDK (package
// client) links no AWS or smithy package, and the HTTP door (package httpdoor) does not
// link the gRPC server.
package layers
