package testenv

import (
	"debug/buildinfo"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// MinIOVersion is the version of github.com/minio/minio that the tests run, as `go
// install` spells it. It is pinned in one place, the file minio.version beside this
// one, which the Makefile reads too.
var MinIOVersion = strings.TrimSpace(minioVersionFile)

//go:embed minio.version
var minioVersionFile string

// minioModule is MinIO's module and main package path.
const minioModule = "github.com/minio/minio"

// RedisServerBinary returns the path of redis-server: $CHUNKUP_REDIS_SERVER if set, else
// redis-server on PATH.
func RedisServerBinary() (string, error) {
	if p := os.Getenv("CHUNKUP_REDIS_SERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("CHUNKUP_REDIS_SERVER=%s: %w", p, err)
		}
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redis-server is not on PATH: run `make test` (its `deps` step " +
			"installs Debian's redis-server), install it by hand, or set CHUNKUP_REDIS_SERVER")
	}
	return p, nil
}

// MinIOBinary returns the path of the MinIO server: $CHUNKUP_MINIO if set, else
// CacheDir()/bin/minio. When that is missing or not MinIOVersion, it builds it with `go
// install github.com/minio/minio@MinIOVersion` (a few minutes), under a file lock so
// that test binaries running in parallel build it once.
func MinIOBinary() (string, error) {
	if p := os.Getenv("CHUNKUP_MINIO"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("CHUNKUP_MINIO=%s: %w", p, err)
		}
		return p, nil
	}
	return goInstalled("minio", minioModule, minioModule, MinIOVersion)
}

// goInstalled returns CacheDir()/bin/name, the binary of package pkg of module at
// version. When that is missing or another version, it builds it with `go install
// pkg@version` (minutes, for a server), under a file lock so that test binaries running
// in parallel build it once.
func goInstalled(name, module, pkg, version string) (string, error) {
	bin := filepath.Join(BinDir(), name)
	if isModuleVersion(bin, module, version) {
		return bin, nil
	}
	err := withFileLock(filepath.Join(CacheDir(), name+".lock"), func() error {
		if isModuleVersion(bin, module, version) { // another process built it
			return nil
		}
		if err := os.MkdirAll(BinDir(), 0o755); err != nil {
			return err
		}
		cmd := exec.Command(goCommand(), "install", pkg+"@"+version)
		cmd.Dir = CacheDir() // outside any module
		cmd.Env = append(os.Environ(), "GOBIN="+BinDir(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go install %s@%s: %v\n%s\n(`make deps` runs the same install)", pkg, version, err, out)
		}
		if !isModuleVersion(bin, module, version) {
			return fmt.Errorf("go install %s@%s did not produce %s", pkg, version, bin)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return bin, nil
}

// isModuleVersion reports whether bin is a Go binary built from module mod at version.
func isModuleVersion(bin, mod, version string) bool {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return false
	}
	return info.Main.Path == mod && info.Main.Version == version
}
