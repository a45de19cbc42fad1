// Package fault gives chunkup's errors a kind: what went wrong in words every door
// understands (not found, invalid, exhausted, …), so that each door maps kinds to its
// own codes in one small table (the gRPC door to status codes, the HTTP door to
// statuses and problem types) instead of knowing every error of every package. The
// model is connect-go's Code.
//
// An error has a kind when it, or an error it wraps, is an *Error or implements
// Kind() Kind. Its message is for the caller: it speaks of the request, never of a
// server's flags.
package fault

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Kind is what went wrong, as a caller can act on it.
type Kind int

// The kinds. Each says what the caller may do about it.
const (
	// Internal: a fault of the server; the caller can only retry later. The zero Kind.
	Internal Kind = iota
	// Invalid: the request is wrong in itself; fix it.
	Invalid
	// NotFound: no such upload or object (or one the caller may not see).
	NotFound
	// OutOfRange: a chunk number beyond what the upload may have.
	OutOfRange
	// TooLarge: the upload is larger than this server takes; no retry helps.
	TooLarge
	// Exists: what the request would create exists already (an object at the key of an
	// if_absent create; a client_node_id bound to another upload).
	Exists
	// Conflict: the upload's state does not allow the request now (completed, being
	// completed, a part recorded with other bytes, a size that contradicts it).
	Conflict
	// Ended: the upload was aborted, failed or expired and takes nothing more.
	Ended
	// Busy: a part of the upload is being worked on right now; retry shortly.
	Busy
	// Locked: another request is appending to the upload; retry when it is done.
	Locked
	// DataLoss: the bytes do not match their checksum; send them again.
	DataLoss
	// Exhausted: the caller's tenant reached a quota or rate; retry after the delay.
	Exhausted
	// Overloaded: capacity is in use (the server's memory or staged bytes, or the
	// streams a tenant may have open at once) and frees up as work ends; retry after the
	// delay.
	Overloaded
	// Unavailable: a store cannot be reached, or the server is shutting down; retry.
	Unavailable
	// Deadline: the request ran out of time.
	Deadline
	// Canceled: the caller went away.
	Canceled
	// Unauthenticated: the credentials are missing or wrong.
	Unauthenticated
	// Denied: the caller may not do this.
	Denied
	// Unsupported: this server does not offer what the request needs.
	Unsupported
)

// Kinds lists every kind, for the doors' tables and their tests.
var Kinds = []Kind{Internal, Invalid, NotFound, OutOfRange, TooLarge, Exists, Conflict, Ended, Busy,
	Locked, DataLoss, Exhausted, Overloaded, Unavailable, Deadline, Canceled, Unauthenticated, Denied, Unsupported}

var names = map[Kind]string{
	Internal: "internal", Invalid: "invalid", NotFound: "not found", OutOfRange: "out of range",
	TooLarge: "too large", Exists: "exists", Conflict: "conflict", Ended: "ended", Busy: "busy",
	Locked: "locked", DataLoss: "data loss", Exhausted: "exhausted", Overloaded: "overloaded",
	Unavailable: "unavailable", Deadline: "deadline", Canceled: "canceled",
	Unauthenticated: "unauthenticated", Denied: "denied", Unsupported: "unsupported",
}

func (k Kind) String() string {
	if n, ok := names[k]; ok {
		return n
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Error is an error with a kind, a message for the caller, and, for a refusal worth
// retrying, how long to wait.
type Error struct {
	Kind Kind
	Msg  string
	// RetryAfter is how long the caller should wait before it retries; zero: the door's
	// default for the kind.
	RetryAfter time.Duration
	// Err is the cause, kept for errors.Is and errors.As (its text is not shown).
	Err error
}

func (e *Error) Error() string { return e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// New returns an error of kind k with message msg.
func New(k Kind, msg string) *Error { return &Error{Kind: k, Msg: msg} }

// Errorf returns an error of kind k with a formatted message. A %w verb makes the error
// wrap its operand, as fmt.Errorf does.
func Errorf(k Kind, format string, a ...any) *Error {
	err := fmt.Errorf(format, a...)
	return &Error{Kind: k, Msg: err.Error(), Err: errors.Unwrap(err)}
}

// Wrap returns err as an error of kind k with message msg (err stays reachable for
// errors.Is and errors.As).
func Wrap(err error, k Kind, msg string) *Error { return &Error{Kind: k, Msg: msg, Err: err} }

// kinded is an error type that knows its kind.
type kinded interface {
	error
	Kind() Kind
}

// KindOf returns err's kind: that of the first error in its chain with one, else
// Canceled or Deadline for a context's end, else Internal.
func KindOf(err error) Kind {
	for e := err; e != nil; {
		switch x := e.(type) {
		case *Error:
			return x.Kind
		case kinded:
			return x.Kind()
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				if k := KindOf(inner); k != Internal {
					return k
				}
			}
			e = nil
		default:
			e = nil
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return Deadline
	}
	return Internal
}

// Has reports whether err is of kind k.
func Has(err error, k Kind) bool { return err != nil && KindOf(err) == k }

// RetryAfter returns the delay the first *Error in err's chain (or an error with a
// RetryAfter() method) asks for, or zero.
func RetryAfter(err error) time.Duration {
	var r interface{ RetryAfter() time.Duration }
	var fe *Error
	switch {
	case errors.As(err, &fe) && fe.RetryAfter > 0:
		return fe.RetryAfter
	case errors.As(err, &r):
		return r.RetryAfter()
	}
	return 0
}
