package rdb

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Script is a Lua script of the staging tree. Every script is headed, where it is
// defined, by what its KEYS[i] and ARGV[i] are; it touches only the keys it is given
// (all in one slot) and makes every check before its first write, so that a write
// Redis refuses (out of memory refuses a script's first write) leaves everything as it
// was. Results are tables whose first element is a code of one vocabulary (reply.go),
// which Decode checks and the Go side turns into a result or a typed error.
type Script struct{ s *redis.Script }

// NewScript returns the script src.
func NewScript(src string) *Script { return &Script{s: redis.NewScript(src)} }

// Run runs the script (EVALSHA, falling back to EVAL).
func (s *Script) Run(ctx context.Context, c *Conn, keys []string, args ...any) *redis.Cmd {
	return s.s.Run(ctx, c.Client, keys, args...)
}

// Eval queues the script in a pipeline. EVAL rather than EVALSHA: a pipeline cannot
// fall back on NOSCRIPT, and a script's text is small next to a chunk.
func (s *Script) Eval(ctx context.Context, c *Conn, p redis.Pipeliner, keys []string, args ...any) *redis.Cmd {
	return s.s.Eval(ctx, p, keys, args...)
}
