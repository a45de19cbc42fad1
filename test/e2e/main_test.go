package e2e

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestMain gives the suite's own process a soft memory limit of 2 GiB (unless GOMEMLIMIT
// sets one). Its in-process servers and clients move gigabytes (TestLoadWithinBudget's
// 200 uploads at once), and under the race detector every byte of heap the collector
// lets grow costs its shadow memory too: without the limit the binary reached 18 GB
// resident on a 24 GB machine, and once was killed for it; with it, about 7.5 GB, and
// the suite runs no slower. The limit is the process's, not the environment's: the
// `chunkup serve` processes the tests start keep their own defaults.
func TestMain(m *testing.M) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(2 << 30)
	}
	os.Exit(m.Run())
}
