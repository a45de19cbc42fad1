package rdb

import (
	"fmt"
	"strconv"
)

// The result codes of the staging tree's scripts: the first element of every script's
// reply is one of these, and each means one thing in every script that returns it.
// Reply decodes a reply and refuses any other first element, so that a script and its
// Go side cannot drift apart silently.
const (
	// CodeOK: done as asked (what follows is the script's result).
	CodeOK = "ok"
	// CodeNotFound: the upload, document or job the script was given does not exist
	// (any more), or is not the caller's.
	CodeNotFound = "notfound"
	// CodeState: the upload or document is in another state than the script needs;
	// its state follows.
	CodeState = "state"
	// CodeDup: the same thing was done before (a repeated chunk, part or record).
	CodeDup = "dup"
	// CodeDone: the work is done already (a part recorded, an upload completed).
	CodeDone = "done"
	// CodeBusy: someone else holds it now (a lease, the completion guard); until when
	// follows.
	CodeBusy = "busy"
	// CodeLost: the caller's lease or lock is no longer its own.
	CodeLost = "lost"
	// CodeStale: what the caller read has changed since (new bytes of a chunk).
	CodeStale = "stale"
	// CodeFenced: a newer holder's token fences the caller out.
	CodeFenced = "fenced"
	// CodeMissing: data the record points to is not there (a chunk's staged bytes).
	CodeMissing = "missing"
	// CodeExpired: the lease or entry ran out.
	CodeExpired = "expired"
	// CodeBeyond: a chunk beyond the upload's last.
	CodeBeyond = "beyond"
	// CodeLast: another chunk is the upload's last already.
	CodeLast = "last"
	// CodeLastBefore: a chunk claims to be the last but a higher one was received.
	CodeLastBefore = "lastbefore"
	// CodeLastSize: the last chunk's size contradicts the upload's.
	CodeLastSize = "lastsize"
	// CodeRecorded: the chunk's part is recorded in S3 with other bytes.
	CodeRecorded = "recorded"
	// CodeCompleting: the upload is being completed.
	CodeCompleting = "completing"
	// CodeExists: what the script would create exists already.
	CodeExists = "exists"
	// CodeSame: the value asked for is the value there (a size declared again).
	CodeSame = "same"
	// CodeSize: a declared size contradicts the one known.
	CodeSize = "size"
	// CodeShort: a size contradicts a chunk received (shorter than it).
	CodeShort = "short"
	// CodeStage: the chunk must be staged rather than written through.
	CodeStage = "stage"
	// CodeNotReady: the upload lacks parts, or its last chunk is unknown.
	CodeNotReady = "notready"
	// CodeNoBytes: a tail whose bytes are gone.
	CodeNoBytes = "nobytes"
	// CodeHeld: an entry held by its owner (a job being processed, an append lock, a
	// partial upload claimed by a final upload, which follows).
	CodeHeld = "held"
	// CodeDead: a job moved to the dead letters.
	CodeDead = "dead"
	// CodeRetry: a job scheduled again.
	CodeRetry = "retry"
	// CodeRequeued: a job back in the queue.
	CodeRequeued = "requeued"
	// CodeReleased: a lease given back.
	CodeReleased = "released"
	// CodeLive: a job or worker still alive.
	CodeLive = "live"
	// CodeAlive: a worker that reported in time.
	CodeAlive = "alive"
	// CodeStuck: a job that stopped progressing.
	CodeStuck = "stuck"
	// CodeAlready: the change was made before.
	CodeAlready = "already"
	// CodeActive: an upload still active.
	CodeActive = "active"
	// CodeMalformed: an entry that cannot be read.
	CodeMalformed = "malformed"
)

var vocabulary = map[string]bool{
	CodeOK: true, CodeNotFound: true, CodeState: true, CodeDup: true, CodeDone: true, CodeBusy: true,
	CodeLost: true, CodeStale: true, CodeFenced: true, CodeMissing: true, CodeExpired: true,
	CodeBeyond: true, CodeLast: true, CodeLastBefore: true, CodeLastSize: true, CodeRecorded: true,
	CodeCompleting: true, CodeExists: true, CodeSame: true, CodeSize: true, CodeShort: true,
	CodeStage: true, CodeNotReady: true, CodeNoBytes: true, CodeHeld: true, CodeDead: true,
	CodeRetry: true, CodeRequeued: true, CodeReleased: true, CodeLive: true, CodeAlive: true,
	CodeStuck: true, CodeAlready: true, CodeActive: true, CodeMalformed: true,
}

// Reply is a script's reply: its code and the values after it.
type Reply struct {
	script string
	Code   string
	vals   []any
}

// Decode reads the reply of script (named for errors) from its command (run, or
// queued in a pipeline that has run): a table whose first element is a code of the
// vocabulary. Another reply is an error naming the script, never a panic.
func Decode(script string, cmd interface{ Slice() ([]any, error) }) (Reply, error) {
	res, err := cmd.Slice()
	if err != nil {
		return Reply{}, err
	}
	if len(res) == 0 {
		return Reply{}, fmt.Errorf("staging: script %s returned an empty reply", script)
	}
	code, ok := res[0].(string)
	if !ok || !vocabulary[code] {
		return Reply{}, fmt.Errorf("staging: script %s returned %v, not a result code", script, res[0])
	}
	return Reply{script: script, Code: code, vals: res[1:]}, nil
}

// Len is the number of values after the code.
func (r Reply) Len() int { return len(r.vals) }

// Str is value i (from 0, after the code) as a string; "" when there is none.
func (r Reply) Str(i int) string {
	if i >= len(r.vals) {
		return ""
	}
	switch x := r.vals[i].(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return ""
}

// I64 is value i as an integer (a script's integer or a decimal string); 0 when none.
func (r Reply) I64(i int) int64 {
	if i >= len(r.vals) {
		return 0
	}
	return I64(r.vals[i])
}

// U32 is value i as a uint32; 0 when there is none.
func (r Reply) U32(i int) uint32 {
	if i >= len(r.vals) {
		return 0
	}
	return U32(r.vals[i])
}

// List is value i as a nested table (a script's HGETALL, say); nil when none.
func (r Reply) List(i int) []any {
	if i >= len(r.vals) {
		return nil
	}
	l, _ := r.vals[i].([]any)
	return l
}

// Flag is value i as a boolean ("1" or 1); false when there is none.
func (r Reply) Flag(i int) bool { return r.Str(i) == "1" }

// Unexpected is the error for a code the caller does not handle.
func (r Reply) Unexpected() error {
	return fmt.Errorf("staging: script %s returned %q, which its caller does not expect", r.script, r.Code)
}
