package rdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
)

// Classify wraps a Redis error in staging.ErrUnavailable or staging.ErrFull when it is
// one of those refusals; other errors (and redis.Nil) are returned as they are.
func Classify(err error) error {
	if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, staging.ErrUnavailable) || errors.Is(err, staging.ErrFull) {
		return err
	}
	switch {
	case redis.IsOOMError(err):
		return fmt.Errorf("%w: %w", staging.ErrFull, err)
	case unavailable(err):
		return fmt.Errorf("%w: %w", staging.ErrUnavailable, err)
	}
	return err
}

func unavailable(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.As(err, &ne), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return true
	}
	return redis.IsLoadingError(err) || redis.IsMasterDownError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsReadOnlyError(err) || redis.IsMaxClientsError(err) ||
		redis.IsNoReplicasError(err)
}

// classifyHook makes every command's error pass through Classify, so that the stores'
// callers see staging.ErrUnavailable and staging.ErrFull whichever method they called.
type classifyHook struct{}

func (classifyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (classifyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return Classify(next(ctx, cmd))
	}
}

func (classifyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if e := c.Err(); e != nil {
				c.SetErr(Classify(e))
			}
		}
		return Classify(err)
	}
}
