package testenv

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// The Node packages the tests run (tus-js-client, the HTTP door's client, and
// puppeteer-core, which drives Debian's chromium), pinned with their whole tree in
// node/package-lock.json. They are installed with `npm ci --ignore-scripts` (no
// install scripts, so no browser download) into the cache, never into the repository:
// `make deps` does it, and NodeModules does it itself when a test runs without make.
var (
	//go:embed node/package.json
	nodePackageJSON []byte
	//go:embed node/package-lock.json
	nodePackageLock []byte
)

// NodeDir is where the tests' Node packages are installed: CacheDir()/node/ and the
// first 16 hex digits of the SHA-256 of node/package-lock.json, so that a changed lock
// installs afresh beside the old one. The Makefile computes the same name.
func NodeDir() string {
	sum := sha256.Sum256(nodePackageLock)
	return filepath.Join(CacheDir(), "node", hex.EncodeToString(sum[:])[:16])
}

// nodeInstalled marks a finished install (npm ci that was interrupted leaves none).
const nodeInstalled = ".installed"

// NodeBinary returns the path of node: $CHUNKUP_NODE if set, else node on PATH.
func NodeBinary() (string, error) {
	if p := os.Getenv("CHUNKUP_NODE"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("node")
	if err != nil {
		return "", errors.New("node is not on PATH: run `make deps` (it installs Debian's nodejs and npm), or set CHUNKUP_NODE")
	}
	return p, nil
}

// NodeModules returns the node_modules directory holding the tests' Node packages
// (for NODE_PATH), installing them first if they are missing, under a file lock so that
// test binaries running in parallel install them once.
func NodeModules(t TB) string {
	t.Helper()
	dir := NodeDir()
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(dir, nodeInstalled)); err == nil {
		return modules
	}
	err := withFileLock(filepath.Join(CacheDir(), "node.lock"), func() error {
		if _, err := os.Stat(filepath.Join(dir, nodeInstalled)); err == nil {
			return nil // another process installed them
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			return errors.New("npm is not on PATH: run `make deps` (it installs Debian's nodejs and npm)")
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for name, b := range map[string][]byte{"package.json": nodePackageJSON, "package-lock.json": nodePackageLock} {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				return err
			}
		}
		t.Logf("testenv: installing the tests' Node packages into %s (npm ci)", dir)
		cmd := exec.Command(npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PUPPETEER_SKIP_DOWNLOAD=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("npm ci in %s: %v\n%s\n(`make deps` runs the same install)", dir, err, out)
		}
		return os.WriteFile(filepath.Join(dir, nodeInstalled), nil, 0o644)
	})
	if err != nil {
		t.Fatalf("testenv: node packages: %v", err)
	}
	return modules
}

// ChromiumBinary returns the path of Debian's chromium: $CHUNKUP_CHROMIUM if set, else
// chromium on PATH.
func ChromiumBinary() (string, error) {
	if p := os.Getenv("CHUNKUP_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("chromium is not on PATH: run `make deps` (it installs Debian's chromium), or set CHUNKUP_CHROMIUM")
}
