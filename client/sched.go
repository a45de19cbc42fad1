package client

import (
	"context"
	"errors"
	"sync"
)

var errFinished = errors.New("every chunk acknowledged")

// scheduler hands chunks to streams. It holds at most limit chunks that are read but not
// yet acknowledged, which is what bounds the SDK's memory: the reader blocks in add
// until acknowledgements make room.
type scheduler struct {
	mu          sync.Mutex
	changed     chan struct{} // closed and replaced on every change
	queue       []*chunk      // to send: requeued first, then fresh
	outstanding int           // read and not acknowledged
	limit       int
	closed      bool
	readErr     error
}

func newScheduler(limit int) *scheduler {
	return &scheduler{changed: make(chan struct{}), limit: limit}
}

func (s *scheduler) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// add queues a freshly read chunk, waiting while limit chunks are outstanding.
func (s *scheduler) add(ctx context.Context, c *chunk) error {
	for {
		s.mu.Lock()
		if s.outstanding < s.limit {
			s.outstanding++
			s.queue = append(s.queue, c)
			s.notify()
			s.mu.Unlock()
			return nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-ch:
		}
	}
}

// close says the reader is done (err non-nil when it failed).
func (s *scheduler) close(err error) {
	s.mu.Lock()
	s.closed, s.readErr = true, err
	s.notify()
	s.mu.Unlock()
}

// take returns the next chunk to send, or errFinished once the reader is done and every
// chunk is acknowledged.
func (s *scheduler) take(ctx context.Context) (*chunk, error) {
	for {
		s.mu.Lock()
		if len(s.queue) > 0 {
			c := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return c, nil
		}
		if s.closed && (s.readErr != nil || s.outstanding == 0) {
			err := s.readErr
			s.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return nil, errFinished
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}

// ack records that one chunk was acknowledged.
func (s *scheduler) ack() {
	s.mu.Lock()
	s.outstanding--
	s.notify()
	s.mu.Unlock()
}

// requeue puts chunks back, in front, to be sent again.
func (s *scheduler) requeue(cs []*chunk) {
	if len(cs) == 0 {
		return
	}
	s.mu.Lock()
	s.queue = append(cs, s.queue...)
	s.notify()
	s.mu.Unlock()
}
