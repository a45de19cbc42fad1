package rdb

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
)

// Listen subscribes to channels (sharded ones on a cluster, each on a connection to the
// node that serves it: go-redis follows a channel's slot when a node fails over). It
// does not wait for Redis: while Redis is unreachable the subscriptions keep
// reconnecting, and notices flow once it is back. For listeners that also sweep a
// durable index, so that a notice missed meanwhile costs only latency.
func (c *Conn) Listen(ctx context.Context, channels ...string) *staging.Subscription {
	return merge(c.pubsubs(ctx, channels)...)
}

func (c *Conn) pubsubs(ctx context.Context, channels []string) []*redis.PubSub {
	if !c.Cluster {
		return []*redis.PubSub{c.Client.Subscribe(ctx, channels...)}
	}
	pss := make([]*redis.PubSub, len(channels))
	for i, ch := range channels {
		pss[i] = c.Client.SSubscribe(ctx, ch)
	}
	return pss
}

// merge delivers the payloads of several subscriptions on one channel.
func merge(pss ...*redis.PubSub) *staging.Subscription {
	out := make(chan string, 64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, ps := range pss {
		wg.Go(func() {
			for msg := range ps.Channel() {
				select {
				case out <- msg.Payload:
				case <-done:
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(out) }()
	var once sync.Once
	return staging.NewSubscription(out, func() error {
		once.Do(func() { close(done) })
		var errs []error
		for _, ps := range pss {
			errs = append(errs, ps.Close())
		}
		return errors.Join(errs...)
	})
}
