package rdb

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Index is a global index: a sorted set of members (upload ids, or "ID/N" chunk refs)
// scored by when someone should look at them (unix ms), split into c.Shards shards by
// upload id. An index is a hint kept idempotently: added before the state it points at,
// removed after the work is done, so a crash leaves at worst an entry that leads to
// nothing and is dropped when visited.
type Index struct {
	c    *Conn
	base string
}

// NewIndex returns the index named base on c.
func NewIndex(c *Conn, base string) *Index { return &Index{c: c, base: base} }

// key is the shard holding upload id's entries.
func (x *Index) key(id string) string {
	if x.c.Shards == 1 {
		return x.base
	}
	return shardKey(x.base, shardOf(id, x.c.Shards))
}

// keys are every shard.
func (x *Index) keys() []string {
	if x.c.Shards == 1 {
		return []string{x.base}
	}
	ks := make([]string, x.c.Shards)
	for k := range ks {
		ks[k] = shardKey(x.base, k)
	}
	return ks
}

func score(at time.Time) float64 { return float64(at.UnixMilli()) }

// Add adds member (of upload id) due at at, unless it is there already.
func (x *Index) Add(ctx context.Context, id, member string, at time.Time) error {
	return x.c.Client.ZAddNX(ctx, x.key(id), redis.Z{Score: score(at), Member: member}).Err()
}

// AddIn queues Add in pipeline p.
func (x *Index) AddIn(ctx context.Context, p redis.Pipeliner, id, member string, at time.Time) *redis.IntCmd {
	return p.ZAddNX(ctx, x.key(id), redis.Z{Score: score(at), Member: member})
}

// AddMany adds members of upload id due at at, unless they are there already.
func (x *Index) AddMany(ctx context.Context, id string, members []string, at time.Time) error {
	if len(members) == 0 {
		return nil
	}
	zs := make([]redis.Z, len(members))
	for i, m := range members {
		zs[i] = redis.Z{Score: score(at), Member: m}
	}
	return x.c.Client.ZAddNX(ctx, x.key(id), zs...).Err()
}

// Set adds member due at at, or moves it there.
func (x *Index) Set(ctx context.Context, id, member string, at time.Time) error {
	return x.c.Client.ZAdd(ctx, x.key(id), redis.Z{Score: score(at), Member: member}).Err()
}

// Defer moves member's due time to at, only if it is in the index.
func (x *Index) Defer(ctx context.Context, id, member string, at time.Time) error {
	return x.c.Client.ZAddXX(ctx, x.key(id), redis.Z{Score: score(at), Member: member}).Err()
}

// DeferIn queues Defer in pipeline p.
func (x *Index) DeferIn(ctx context.Context, p redis.Pipeliner, id, member string, at time.Time) {
	p.ZAddXX(ctx, x.key(id), redis.Z{Score: score(at), Member: member})
}

// Done removes member.
func (x *Index) Done(ctx context.Context, id, member string) error {
	return x.c.Client.ZRem(ctx, x.key(id), member).Err()
}

// DoneIn queues Done in pipeline p.
func (x *Index) DoneIn(ctx context.Context, p redis.Pipeliner, id, member string) *redis.IntCmd {
	return p.ZRem(ctx, x.key(id), member)
}

// Due returns up to limit members due at or before now, earliest first, across the
// shards (one round trip per node).
func (x *Index) Due(ctx context.Context, limit int64) ([]string, error) {
	keys := x.keys()
	by := &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(x.c.NowMs(), 10), Count: limit}
	if len(keys) == 1 {
		return x.c.Client.ZRangeByScore(ctx, keys[0], by).Result()
	}
	due, _, err := x.DueNext(ctx, limit)
	return due, err
}

// DueNext is Due, and how long from now until the earliest member it did not return
// falls due: zero when more than limit are due, negative when the index holds nothing
// else. A sweeper uses it to sleep past an idle index instead of polling it (in the
// same round trip: the second range costs Redis a lookup, not a reply of any size).
func (x *Index) DueNext(ctx context.Context, limit int64) ([]string, time.Duration, error) {
	now := x.c.NowMs()
	by := &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(now, 10), Count: limit}
	after := &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf", Count: 1}
	keys := x.keys()
	due := make([]*redis.ZSliceCmd, len(keys))
	next := make([]*redis.ZSliceCmd, len(keys))
	_, err := x.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			due[i] = p.ZRangeByScoreWithScores(ctx, k, by)
			next[i] = p.ZRangeByScoreWithScores(ctx, k, after)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	var all []redis.Z
	for _, c := range due {
		all = append(all, c.Val()...)
	}
	if len(keys) > 1 {
		slices.SortFunc(all, func(a, b redis.Z) int { return cmp.Compare(a.Score, b.Score) })
	}
	wait := time.Duration(-1)
	if int64(len(all)) >= limit {
		// As many due as asked for (or more): the rest are due now.
		wait, all = 0, all[:limit]
	} else {
		for _, c := range next {
			if zs := c.Val(); len(zs) > 0 {
				d := time.Duration(int64(zs[0].Score)-now) * time.Millisecond
				if wait < 0 || d < wait {
					wait = d
				}
			}
		}
	}
	out := make([]string, len(all))
	for i, z := range all {
		out[i] = z.Member.(string)
	}
	return out, wait, nil
}

// DropStray removes member from whichever shard holds it: for a member that does not
// parse (not written by chunkup), so it is never offered again.
func (x *Index) DropStray(ctx context.Context, member string) {
	for _, k := range x.keys() {
		x.c.Client.ZRem(ctx, k, member)
	}
}

// Len is the number of members over all shards.
func (x *Index) Len(ctx context.Context) (int64, error) {
	keys := x.keys()
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := x.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ZCard(ctx, k)
		}
		return nil
	})
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, err
}

// Oldest is the lowest due time over all shards; ok is false when the index is empty.
func (x *Index) Oldest(ctx context.Context) (at time.Time, ok bool, err error) {
	keys := x.keys()
	cmds := make([]*redis.ZSliceCmd, len(keys))
	if _, err := x.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ZRangeWithScores(ctx, k, 0, 0)
		}
		return nil
	}); err != nil {
		return time.Time{}, false, err
	}
	var low float64
	for _, c := range cmds {
		if zs := c.Val(); len(zs) > 0 && (!ok || zs[0].Score < low) {
			low, ok = zs[0].Score, true
		}
	}
	return time.UnixMilli(int64(low)), ok, nil
}

// Page returns up to count members from position start, counting through the shards
// in order (for walks through the whole index, such as start-up recovery).
func (x *Index) Page(ctx context.Context, start, count int64) ([]string, error) {
	var out []string
	for _, k := range x.keys() {
		n, err := x.c.Client.ZCard(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if start >= n {
			start -= n
			continue
		}
		ms, err := x.c.Client.ZRange(ctx, k, start, start+count-int64(len(out))-1).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, ms...)
		start = 0
		if int64(len(out)) >= count {
			break
		}
	}
	return out, nil
}
