// Package rdb is the plumbing every store of the staging tree shares: the Redis client
// with the store's settings and clock, every key name and the shard layout, the script
// runner, the global index type, pub/sub subscriptions, and the classification of
// Redis' errors into staging.ErrUnavailable and staging.ErrFull. It is internal to the
// staging tree, so that no other package can name a key.
package rdb

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
)

// Conn is a Redis client with the settings the stores share.
type Conn struct {
	// Client is the Redis client; its commands' errors are classified (see Classify).
	Client redis.UniversalClient
	// Cluster is true on a Redis Cluster: global indexes are split into shards, and
	// pub/sub is sharded (SPUBLISH, SSUBSCRIBE).
	Cluster bool
	// Shards is the number of shards of each global index (1 on a single Redis).
	Shards int
	// Cfg is the staging configuration with its defaults filled in.
	Cfg staging.Config
}

// hooked remembers the clients that have the classifying hook, so that stores opened on
// one client install it once.
var hooked sync.Map // redis.UniversalClient → struct{}

// Open returns a Conn on client with cfg (validated by the caller).
func Open(client redis.UniversalClient, cfg staging.Config) *Conn {
	if _, done := hooked.LoadOrStore(client, struct{}{}); !done {
		client.AddHook(classifyHook{})
	}
	c := &Conn{Client: client, Cfg: cfg.WithDefaults(), Shards: 1}
	if _, c.Cluster = client.(*redis.ClusterClient); c.Cluster {
		c.Shards = indexShards
	}
	return c
}

// Now is the store's clock reading.
func (c *Conn) Now() time.Time { return c.Cfg.Now() }

// NowMs is the clock reading in unix milliseconds, as scripts and indexes store time.
func (c *Conn) NowMs() int64 { return c.Cfg.Now().UnixMilli() }

// KeysTTL is the Redis TTL of an active upload's keys, refreshed on activity.
func (c *Conn) KeysTTL() int64 { return (c.Cfg.StateTTL + c.Cfg.Retention).Milliseconds() }
