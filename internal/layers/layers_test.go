package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A layer is one row of the table: its name and the packages it names, relative to the
// module ("cmd/chunkup"); an entry ending in "/..." names a package and all below it.
type layer struct {
	name    string
	entries []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// parseLayers reads the table under "## Layers" in the architecture doc, top row first.
// Entries are the backticked words of the packages column; "internal/{crc,ids}" is
// "internal/crc" and "internal/ids".
func parseLayers(doc string) ([]layer, error) {
	_, section, ok := strings.Cut(doc, "\n## Layers\n")
	if !ok {
		return nil, errors.New(`no "## Layers" section`)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	var layers []layer
	header := true
	for _, line := range strings.Split(section, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 {
			return nil, fmt.Errorf("table row %q has no packages column", line)
		}
		if header || strings.Trim(cells[0], " -:") == "" { // the header and its rule
			header = false
			continue
		}
		l := layer{name: strings.TrimSpace(cells[0])}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			l.entries = append(l.entries, expand(m[1])...)
		}
		if len(l.entries) == 0 {
			return nil, fmt.Errorf("layer %q names no package", l.name)
		}
		layers = append(layers, l)
	}
	if len(layers) < 2 {
		return nil, fmt.Errorf("the layer table has %d rows", len(layers))
	}
	return layers, nil
}

// expand expands one brace group: "a/{b,c}" is "a/b", "a/c".
func expand(s string) []string {
	open, close := strings.Index(s, "{"), strings.Index(s, "}")
	if open < 0 || close < open {
		return []string{s}
	}
	var out []string
	for _, alt := range strings.Split(s[open+1:close], ",") {
		out = append(out, s[:open]+strings.TrimSpace(alt)+s[close+1:])
	}
	return out
}

// matches reports whether entry names pkg, and how specifically: an exact name beats
// any "/..." pattern, a longer pattern a shorter one.
func matches(entry, pkg string) (bool, int) {
	if base, ok := strings.CutSuffix(entry, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/"), len(base)
	}
	return pkg == entry, 1 << 30
}

// place maps each package to the index of its layer (0 is the top). A package no entry
// names, a package named exactly in two layers and an entry that names no package are
// problems: the table must say where everything is, and nothing that is not.
func place(layers []layer, pkgs []string) (map[string]int, []string) {
	at := map[string]int{}
	var problems []string
	used := map[string]bool{}
	for _, pkg := range pkgs {
		best, bestSpec, tie := -1, -1, false
		for i, l := range layers {
			for _, e := range l.entries {
				ok, spec := matches(e, pkg)
				if !ok {
					continue
				}
				used[e] = true
				switch {
				case spec > bestSpec:
					best, bestSpec, tie = i, spec, false
				case spec == bestSpec && i != best:
					tie = true
				}
			}
		}
		switch {
		case best < 0:
			problems = append(problems, fmt.Sprintf("package %s is in no layer of the table", pkg))
		case tie:
			problems = append(problems, fmt.Sprintf("package %s is in two layers of the table", pkg))
		default:
			at[pkg] = best
		}
	}
	for _, l := range layers {
		for _, e := range l.entries {
			if !used[e] {
				problems = append(problems, fmt.Sprintf("layer %q names %s, which is no package", l.name, e))
			}
		}
	}
	return at, problems
}

// upward names every import of a package in a layer above the importer's.
func upward(layers []layer, at map[string]int, imports map[string][]string) []string {
	var problems []string
	for _, pkg := range sortedKeys(imports) {
		from, ok := at[pkg]
		if !ok {
			continue
		}
		for _, imp := range imports[pkg] {
			if to, ok := at[imp]; ok && to < from {
				problems = append(problems, fmt.Sprintf("%s (layer %q) imports %s (layer %q, above it)",
					pkg, layers[from].name, imp, layers[to].name))
			}
		}
	}
	return problems
}

// cycles names each cycle of imports found by a depth-first walk.
func cycles(imports map[string][]string) []string {
	const (
		walking = 1
		done    = 2
	)
	state := map[string]int{}
	var path, problems []string
	var walk func(string)
	walk = func(pkg string) {
		state[pkg] = walking
		path = append(path, pkg)
		for _, imp := range imports[pkg] {
			switch state[imp] {
			case walking:
				i := slices.Index(path, imp)
				problems = append(problems, "import cycle: "+strings.Join(append(slices.Clone(path[i:]), imp), " -> "))
			case 0:
				walk(imp)
			}
		}
		path = path[:len(path)-1]
		state[pkg] = done
	}
	for _, pkg := range sortedKeys(imports) {
		if state[pkg] == 0 {
			walk(pkg)
		}
	}
	return problems
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// moduleRoot is the directory of the module's go.mod, two levels up from here.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

func goList(t *testing.T, root string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// modulePackages returns the module's path and, for each of its packages (relative to
// the module), the module packages its own code imports (tests' imports left out).
func modulePackages(t *testing.T, root string) (string, map[string][]string) {
	t.Helper()
	mod := strings.TrimSpace(string(goList(t, root, "-m", "-f", "{{.Path}}")))
	dec := json.NewDecoder(bytes.NewReader(goList(t, root, "-json=ImportPath,Imports", "./...")))
	imports := map[string][]string{}
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list -json: %v", err)
		}
		rel := strings.TrimPrefix(p.ImportPath, mod+"/")
		imports[rel] = []string{}
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, mod+"/"); ok {
				imports[rel] = append(imports[rel], r)
			}
		}
	}
	return mod, imports
}

// TestImportsFollowLayers checks every package of the module against the layer table of
// docs/architecture.md: each is in a layer, none imports a package in a layer above
// its own, and no imports go round in a cycle. A new package fails it until the table
// says where it belongs.
func TestImportsFollowLayers(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := parseLayers(string(doc))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	_, imports := modulePackages(t, root)
	at, problems := place(layers, sortedKeys(imports))
	problems = append(problems, upward(layers, at, imports)...)
	problems = append(problems, cycles(imports)...)
	for _, p := range problems {
		t.Error(p)
	}
	if t.Failed() {
		t.Log("the layers are the table under \"## Layers\" in docs/architecture.md, top row first")
	}
}

// TestSDKLinksNoAWS checks that a program using the Go SDK links no AWS SDK or smithy
// package: the backoff the SDK shares with the servers (internal/retry) imports none, and
// the S3 error classification lives in s3store.
func TestSDKLinksNoAWS(t *testing.T) {
	for _, dep := range strings.Fields(string(goList(t, moduleRoot(t), "-deps", "./client"))) {
		if strings.HasPrefix(dep, "github.com/aws/") || strings.Contains(dep, "smithy") {
			t.Errorf("package client links %s", dep)
		}
	}
}

// TestDoorsStandOnTheCore checks the shape of the doors: the HTTP door and its adapter
// (./httpdoor/...) do not link the gRPC door (package server); the upload core links
// neither door; and the core's own test of a door (upload/door_test.go) needs neither,
// as a new door would not.
func TestDoorsStandOnTheCore(t *testing.T) {
	root := moduleRoot(t)
	mod := strings.TrimSpace(string(goList(t, root, "-m", "-f", "{{.Path}}")))
	for _, tc := range []struct {
		pkgs   string
		args   []string
		forbid []string
	}{
		{"./httpdoor/...", []string{"-deps", "./httpdoor/..."}, []string{"/server"}},
		{"./upload", []string{"-deps", "./upload"}, []string{"/server", "/httpdoor", "/httpdoor/coreadapter"}},
		{"./upload's tests", []string{"-deps", "-test", "./upload"}, []string{"/server", "/httpdoor", "/httpdoor/coreadapter"}},
	} {
		for _, dep := range strings.Fields(string(goList(t, root, tc.args...))) {
			for _, f := range tc.forbid {
				if dep == mod+f {
					t.Errorf("%s link %s", tc.pkgs, dep)
				}
			}
		}
	}
}

// TestLayerCheckFindsProblems shows the checks fail where they should, on a made-up
// table and module.
func TestLayerCheckFindsProblems(t *testing.T) {
	doc := "# x\n\n## Layers\n\ntext\n\n| layer | packages | what |\n|---|---|---|\n" +
		"| top | `cmd/x`, `test/...` | the binary |\n" +
		"| middle | `a`, `a/...` | a |\n" +
		"| bottom | `internal/{b,c}`, `gone` | leaves |\n\n## Next\n\n| not | `this` | table |\n"
	layers, err := parseLayers(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 3 || !slices.Equal(layers[2].entries, []string{"internal/b", "internal/c", "gone"}) {
		t.Fatalf("parsed %+v", layers)
	}
	imports := map[string][]string{
		"cmd/x":       {"a", "internal/b"},
		"test/e2e":    {"cmd/x"},
		"a":           {"a/sub", "internal/b"},
		"a/sub":       {"internal/c"},
		"internal/b":  {"a/sub"},       // upward
		"internal/c":  {"internal/c2"}, // a cycle with c2
		"internal/c2": {"internal/c"},  // and in no layer
	}
	at, problems := place(layers, sortedKeys(imports))
	problems = append(problems, upward(layers, at, imports)...)
	problems = append(problems, cycles(imports)...)
	want := []string{
		"package internal/c2 is in no layer of the table",
		`layer "bottom" names gone, which is no package`,
		`internal/b (layer "bottom") imports a/sub (layer "middle", above it)`,
		"import cycle: internal/c -> internal/c2 -> internal/c",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	if at["a/sub"] != 1 || at["test/e2e"] != 0 {
		t.Errorf("placed %v", at)
	}
}
