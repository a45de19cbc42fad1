package e2e

import (
	"time"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/completion"
)

func workerCfg() chunkworker.Config {
	return chunkworker.Config{Concurrency: 4, Lease: 2 * time.Second, SweepInterval: 100 * time.Millisecond,
		RetryBase: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond, DrainTimeout: 2 * time.Second}
}

func completerCfg() completion.Config {
	return completion.Config{Lease: 2 * time.Second, SweepInterval: 100 * time.Millisecond,
		RetryBase: 50 * time.Millisecond, RetryMax: 500 * time.Millisecond}
}
