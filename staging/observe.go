package staging

import (
	"context"
	"time"
)

// OutboxOldest returns the lowest score of the outbox index: when the upload (or
// document) that has waited longest got events to publish. ok is false when no outbox
// waits. The score is set when the first event is recorded and reset when a partial
// publish leaves events behind, so it is a lower bound on the oldest event's wait.
// One O(log n) read, for scrape-time gauges.
func (s *Store) OutboxOldest(ctx context.Context) (t time.Time, ok bool, err error) {
	score, ok, err := s.oldest(ctx, outboxIndexKey)
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return time.UnixMilli(int64(score)), true, nil
}
