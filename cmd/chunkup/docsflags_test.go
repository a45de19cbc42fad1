package main

import (
	"context"
	"os"
	"strings"
	"testing"
)

// TestConfigurationDocIsCurrent: the flag tables of docs/configuration.md are what
// `chunkup docs-flags` prints from the flags' definitions, so a default or a help text
// is written once, in code; `make docs` rewrites them.
func TestConfigurationDocIsCurrent(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, got, _, err := splitGenerated(string(doc))
	if err != nil {
		t.Fatalf("docs/configuration.md: %v", err)
	}
	want := docsFlags(context.Background())
	if got == want {
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(gotLines), len(wantLines)) {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("docs/configuration.md is stale: run make docs and commit it.\nfirst difference, line %d of the generated part:\n  doc:   %s\n  flags: %s", i+1, g, w)
		}
	}
}

// TestConfigurationDocIgnoresEnvironment: the environment of whoever runs make docs
// changes no default in the tables.
func TestConfigurationDocIgnoresEnvironment(t *testing.T) {
	want := docsFlags(context.Background())
	t.Setenv("CHUNKUP_GRPC_ADDR", "10.0.0.1:1")
	t.Setenv("CHUNKUP_CHUNK_TTL", "bogus")
	if got := docsFlags(context.Background()); got != want {
		t.Fatal("the environment changed the generated flag tables")
	}
}
