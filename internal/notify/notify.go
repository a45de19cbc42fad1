// Package notify carries in-process wake-ups between the roles of one chunkup process:
// an upload is ready to complete, an event waits to be published. Every wake-up is a
// hint: the work it announces is also in a durable index that a sweep reads, so a
// wake-up dropped (the receiver busy, or in another process) costs only latency. The
// assembly makes one Hub and hands it to the stores that announce and the roles that
// listen; a nil *Hub announces nothing.
package notify

// Hub is the set of in-process wake-ups.
type Hub struct {
	ready  chan string
	events chan struct{}
}

// NewHub returns a Hub.
func NewHub() *Hub {
	return &Hub{ready: make(chan string, 256), events: make(chan struct{}, 1)}
}

// UploadReady announces that upload id has every part and its completion is indexed.
// It never blocks.
func (h *Hub) UploadReady(id string) {
	if h == nil {
		return
	}
	select {
	case h.ready <- id:
	default:
	}
}

// Ready delivers the ids UploadReady announced (nil for a nil Hub: never).
func (h *Hub) Ready() <-chan string {
	if h == nil {
		return nil
	}
	return h.ready
}

// EventRecorded announces that an event was recorded in an outbox and indexed. It
// never blocks; several announcements before the publisher looks make one.
func (h *Hub) EventRecorded() {
	if h == nil {
		return
	}
	select {
	case h.events <- struct{}{}:
	default:
	}
}

// Events delivers EventRecorded's announcements (nil for a nil Hub: never).
func (h *Hub) Events() <-chan struct{} {
	if h == nil {
		return nil
	}
	return h.events
}
