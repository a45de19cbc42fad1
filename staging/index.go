package staging

import (
	"cmp"
	"context"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The global indexes (pending, completions, outbox, active, releases) are sorted sets
// of upload ids or chunk refs, split into s.shards shards (see indexShards). These
// helpers address the shard of one upload's entries, and read across all shards.

// ix is the key of the shard of index base that holds upload id's entries.
func (s *Store) ix(base, id string) string {
	if s.shards == 1 {
		return base
	}
	return shardKey(base, shardOf(id, s.shards))
}

// ixAll is every shard of index base.
func (s *Store) ixAll(base string) []string {
	if s.shards == 1 {
		return []string{base}
	}
	keys := make([]string, s.shards)
	for k := range keys {
		keys[k] = shardKey(base, k)
	}
	return keys
}

// entry is a member of an index shard.
type entry struct {
	key, member string
	score       float64
}

// due returns up to limit entries of index base scored at or before maxMs, earliest
// first, across its shards (one round trip per node).
func (s *Store) due(ctx context.Context, base string, maxMs, limit int64) ([]entry, error) {
	keys := s.ixAll(base)
	by := &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(maxMs, 10), Count: limit}
	if len(keys) == 1 {
		zs, err := s.rdb.ZRangeByScoreWithScores(ctx, keys[0], by).Result()
		return entries(keys[0], zs), err
	}
	cmds := make([]*redis.ZSliceCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ZRangeByScoreWithScores(ctx, k, by)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var all []entry
	for i, c := range cmds {
		all = append(all, entries(keys[i], c.Val())...)
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Compare(a.score, b.score) })
	return all[:min(int64(len(all)), limit)], nil
}

func entries(key string, zs []redis.Z) []entry {
	es := make([]entry, len(zs))
	for i, z := range zs {
		es[i] = entry{key: key, member: z.Member.(string), score: z.Score}
	}
	return es
}

func members(es []entry) []string {
	ms := make([]string, len(es))
	for i, e := range es {
		ms[i] = e.member
	}
	return ms
}

// card is the number of entries of index base, over all shards.
func (s *Store) card(ctx context.Context, base string) (int64, error) {
	keys := s.ixAll(base)
	cmds := make([]*redis.IntCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
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

// oldest is the lowest score in index base, over all shards; ok is false when it is
// empty.
func (s *Store) oldest(ctx context.Context, base string) (score float64, ok bool, err error) {
	keys := s.ixAll(base)
	cmds := make([]*redis.ZSliceCmd, len(keys))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.ZRangeWithScores(ctx, k, 0, 0)
		}
		return nil
	}); err != nil {
		return 0, false, err
	}
	for _, c := range cmds {
		if zs := c.Val(); len(zs) > 0 && (!ok || zs[0].Score < score) {
			score, ok = zs[0].Score, true
		}
	}
	return score, ok, nil
}

// page returns up to count members of index base from position start, counting
// through its shards in order (for start-up recovery, which pages through them all).
func (s *Store) page(ctx context.Context, base string, start, count int64) ([]string, error) {
	var out []string
	for _, k := range s.ixAll(base) {
		n, err := s.rdb.ZCard(ctx, k).Result()
		if err != nil {
			return nil, err
		}
		if start >= n {
			start -= n
			continue
		}
		ms, err := s.rdb.ZRange(ctx, k, start, start+count-int64(len(out))-1).Result()
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
