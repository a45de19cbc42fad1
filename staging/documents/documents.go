// Package documents stores the documents of chunkup's OCR pipeline: a document is a
// completed upload of an image or PDF (its id is the upload id, so its hash shares the
// upload's slot), with its status in the OCR and review flow, its OCR summary, its
// evaluation and a reviewer's verification. Every status change is a compare-and-set
// that records its event in the upload's outbox in the same step.
package documents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/internal/rdb"
	"github.com/chunkup/chunkup/staging/outbox"
)

// Store reads and changes documents.
type Store struct {
	c      *rdb.Conn
	outbox *outbox.Outbox
}

// New returns the Store on client, recording events through ob.
func New(client redis.UniversalClient, cfg staging.Config, ob *outbox.Outbox) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Store{c: rdb.Open(client, cfg), outbox: ob}, nil
}

// Now returns the store's clock reading.
func (s *Store) Now() time.Time { return s.c.Now() }

// Status is a document's status as stored.
type Status string

// The document statuses: uploaded → processing → ocr_completed → ai_evaluated →
// auto_approved | auto_rejected | needs_review, then approved | rejected by a reviewer;
// failed when OCR cannot be done.
const (
	Uploaded     Status = "uploaded"
	Processing   Status = "processing"
	OCRCompleted Status = "ocr_completed"
	AIEvaluated  Status = "ai_evaluated"
	AutoApproved Status = "auto_approved"
	AutoRejected Status = "auto_rejected"
	NeedsReview  Status = "needs_review"
	Approved     Status = "approved"
	Rejected     Status = "rejected"
	Failed       Status = "failed"
)

// ErrNotFound means no document has the id (or it has expired).
var ErrNotFound = errors.New("document not found")

// StateError means a document is not in a status the transition accepts.
type StateError struct {
	Status Status
	Want   []Status
}

func (e *StateError) Error() string {
	w := make([]string, len(e.Want))
	for i, s := range e.Want {
		w[i] = string(s)
	}
	return fmt.Sprintf("document is %s, not %s", e.Status, strings.Join(w, " or "))
}

// FencedError means a newer OCR job has taken the document over; the caller's job is
// stale and must not change it.
type FencedError struct{ Token, Current int64 }

func (e *FencedError) Error() string {
	return fmt.Sprintf("document held by a newer job (fencing token %d > %d)", e.Current, e.Token)
}

// Document is a document's state as stored.
type Document struct {
	ID                       string
	Status                   Status
	Bucket, Key, ContentType string
	Tenant, CorrelationID    string
	Identity
	JobID    string
	JobToken int64
	// Attempts counts the current job's failed attempts; Reclaims the times it was
	// taken back from a worker that died or stalled (not failures of the document).
	Attempts, Reclaims int
	Error              string
	ErrorTime          time.Time
	MaxRetriesExceeded bool
	OCR                *OCRSummary
	Eval               *Evaluation
	Verification       *Verification
	Created, Updated   time.Time
}

// OCRSummary summarizes a document's OCR result, which is stored in S3 at ResultKey.
type OCRSummary struct {
	ResultKey      string
	Pages, Words   int
	MeanConfidence float64
	PageConfidence []float64
}

// Evaluation is the automatic evaluation of an OCR result.
type Evaluation struct {
	Score    int
	Decision Status
	Reasons  []string
}

// Verification is an external reviewer's decision.
type Verification struct {
	UserID, Result, Decision string
	Score                    float64
	// Metadata is a JSON object, as received.
	Metadata string
	Time     time.Time
}

// Identity is a document's identity and place, from its upload: the node id (a UUID),
// the client's node id, where it comes from, its file name, and its custom metadata (a
// JSON object, "" for none).
type Identity struct {
	NodeID, ClientNodeID, ConnectorID, ParentID, Path, Drive, Name string
	CustomMetadata                                                 string
}

// identityFields are the hash fields of an Identity, in the order of fields().
var identityFields = []string{"node", "cnode", "conn", "parent", "path", "drive", "name", "cmeta"}

func (i Identity) fields() []string {
	return []string{i.NodeID, i.ClientNodeID, i.ConnectorID, i.ParentID, i.Path, i.Drive, i.Name, i.CustomMetadata}
}

func identityOf(h map[string]string) Identity {
	return Identity{NodeID: h["node"], ClientNodeID: h["cnode"], ConnectorID: h["conn"], ParentID: h["parent"],
		Path: h["path"], Drive: h["drive"], Name: h["name"], CustomMetadata: h["cmeta"]}
}

// NewDocument describes a document to create.
type NewDocument struct {
	ID, Bucket, Key, ContentType, Tenant, CorrelationID string
	Identity
}

// docCreateScript creates a document as uploaded unless it exists, and records its
// event in the upload's outbox.
//
//	KEYS[1] document hash
//	KEYS[2] the upload's outbox hash
//	ARGV[1] document TTL (ms)
//	ARGV[2] event id
//	ARGV[3] event record (see OutboxEvent.record)
//	ARGV[4..] document field/value pairs
//
// Returns {"ok"} or {"exists", status}.
var docCreateScript = rdb.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if st then return {'exists', st} end
local f = {}
for i = 4, #ARGV do f[#f+1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(f))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
local p = redis.call('PTTL', KEYS[2])
if p >= 0 and p < tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[2], ARGV[1]) end
return {'ok'}
`)

// docTransitionScript is a document's guarded compare-and-set: it moves the document
// from the status the caller read to a new one, optionally fenced by an OCR job's
// token, and records the transition's event in the upload's outbox.
//
//	KEYS[1] document hash
//	KEYS[2] the upload's outbox hash
//	ARGV[1] expected current status
//	ARGV[2] new status
//	ARGV[3] fencing: "" none; "start" to take the document for job token ARGV[4] (it
//	        must be larger than the recorded job_token); "hold" to require that the
//	        recorded job_token is ARGV[4]
//	ARGV[4] job token
//	ARGV[5] now (unix ms)
//	ARGV[6] document TTL (ms)
//	ARGV[7] event id ("" records no event)
//	ARGV[8] event record
//	ARGV[9] the progress channel, told "ID doc:STATUS" when an event is recorded (for
//	        WatchDocument)
//	ARGV[10] the document's (upload's) id
//	ARGV[11] number of field/value pairs to set that follow; any further ARGV are fields
//	        to delete
//
// Returns {"ok"}, {"notfound"}, {"state", status} or {"fenced", job_token}.
var docTransitionScript = rdb.NewScript(`
local d = redis.call('HMGET', KEYS[1], 'status', 'job_token')
if not d[1] then return {'notfound'} end
if d[1] ~= ARGV[1] then return {'state', d[1]} end
local cur = tonumber(d[2] or '0') or 0
local tok = tonumber(ARGV[4]) or 0
if ARGV[3] == 'start' and tok <= cur then return {'fenced', cur} end
if ARGV[3] == 'hold' and tok ~= cur then return {'fenced', cur} end
local n = tonumber(ARGV[11])
local f = {'status', ARGV[2], 'updated_ms', ARGV[5]}
if ARGV[3] == 'start' then f[#f+1] = 'job_token'; f[#f+1] = ARGV[4] end
for i = 12, 11 + 2*n do f[#f+1] = ARGV[i] end
redis.call('HSET', KEYS[1], unpack(f))
if #ARGV > 11 + 2*n then
  local del = {}
  for i = 12 + 2*n, #ARGV do del[#del+1] = ARGV[i] end
  redis.call('HDEL', KEYS[1], unpack(del))
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[7], ARGV[8])
  local p = redis.call('PTTL', KEYS[2])
  if p >= 0 and p < tonumber(ARGV[6]) then redis.call('PEXPIRE', KEYS[2], ARGV[6]) end
  redis.call('PUBLISH', ARGV[9], ARGV[10] .. ' doc:' .. ARGV[2])
end
return {'ok'}
`)

// Create creates document d as uploaded and records ev, atomically. It reports
// false (and records nothing) when the document exists already.
func (s *Store) Create(ctx context.Context, d NewDocument, ttl time.Duration, ev staging.OutboxEvent) (bool, error) {
	now := s.c.NowMs()
	created := false
	args := []any{ttl.Milliseconds(), ev.ID, outbox.Record(ev),
		"status", string(Uploaded), "bucket", d.Bucket, "key", d.Key, "ct", d.ContentType,
		"tenant", d.Tenant, "corr", d.CorrelationID, "created_ms", now, "updated_ms", now}
	for i, v := range d.Identity.fields() {
		if v != "" {
			args = append(args, identityFields[i], v)
		}
	}
	err := s.outbox.Bracket(ctx, d.ID, func() (bool, error) {
		res, err := rdb.Decode("doc-create", docCreateScript.Run(ctx, s.c, []string{rdb.DocKey(d.ID), rdb.OutboxKey(d.ID)}, args...))
		created = err == nil && res.Code == rdb.CodeOK
		return created, err
	})
	return created, err
}

// Fence says how a transition is guarded by an OCR job's fencing token.
type Fence struct {
	// Start takes the document for the job: Token must exceed the recorded one.
	Start bool
	// Hold requires the recorded token to be Token (the job still owns the document).
	Hold  bool
	Token int64
}

// Change is one document transition.
type Change struct {
	// From lists the statuses the transition accepts.
	From []Status
	To   Status
	// Fence guards OCR transitions (zero: none, for the webhook).
	Fence Fence
	// Set, when not nil, updates parts of the document with the transition.
	JobID              *string
	Attempts           *int
	Reclaims           *int
	Failure            *string // the error; nil leaves it, "" clears it
	MaxRetriesExceeded bool
	OCR                *OCRSummary
	Eval               *Evaluation
	Verification       *Verification
	// Event builds the transition's event from the document as it was; nil records none.
	Event func(prev *Document) (staging.OutboxEvent, error)
}

// Transition applies c to document id as a compare-and-set and records its
// event in the same step. A document in another status gets a *StateError, one taken
// over by a newer job a *FencedError; duplicates are therefore harmless.
func (s *Store) Transition(ctx context.Context, id string, ttl time.Duration, c Change) (*Document, error) {
	for range 5 {
		d, err := s.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		ok := false
		for _, f := range c.From {
			ok = ok || f == d.Status
		}
		if !ok {
			return d, &StateError{Status: d.Status, Want: c.From}
		}
		fence := ""
		switch {
		case c.Fence.Start:
			fence = "start"
		case c.Fence.Hold:
			fence = "hold"
		}
		evID, rec := "", ""
		if c.Event != nil {
			ev, err := c.Event(d)
			if err != nil {
				return nil, err
			}
			evID, rec = ev.ID, outbox.Record(ev)
		}
		set, del := c.fields(s.c.NowMs())
		args := []any{string(d.Status), string(c.To), fence, c.Fence.Token, s.c.NowMs(), ttl.Milliseconds(), evID, rec,
			rdb.ProgressChannel, id, len(set) / 2}
		args = append(args, set...)
		args = append(args, del...)
		var res rdb.Reply
		transition := func() (bool, error) {
			var err error
			res, err = rdb.Decode("doc-transition", docTransitionScript.Run(ctx, s.c, []string{rdb.DocKey(id), rdb.OutboxKey(id)}, args...))
			return err == nil && evID != "" && res.Code == rdb.CodeOK, err
		}
		if evID != "" {
			err = s.outbox.Bracket(ctx, id, transition)
		} else {
			_, err = transition()
		}
		if err != nil {
			return nil, err
		}
		switch res.Code {
		case rdb.CodeOK:
			return d, nil
		case rdb.CodeNotFound:
			return nil, ErrNotFound
		case rdb.CodeFenced:
			return d, &FencedError{Token: c.Fence.Token, Current: res.I64(0)}
		}
		// The status changed between the read and the script: read again.
	}
	return nil, fmt.Errorf("staging: document %s keeps changing; gave up", id)
}

func (c Change) fields(now int64) (set, del []any) {
	if c.JobID != nil {
		set = append(set, "job_id", *c.JobID)
	}
	if c.Attempts != nil {
		set = append(set, "attempts", *c.Attempts)
	}
	if c.Reclaims != nil {
		set = append(set, "reclaims", *c.Reclaims)
	}
	if c.Failure != nil {
		if *c.Failure == "" {
			del = append(del, "error", "error_ms", "max_retries")
		} else {
			mr := "0"
			if c.MaxRetriesExceeded {
				mr = "1"
			}
			set = append(set, "error", *c.Failure, "error_ms", now, "max_retries", mr)
		}
	}
	if o := c.OCR; o != nil {
		pc := make([]string, len(o.PageConfidence))
		for i, v := range o.PageConfidence {
			pc[i] = strconv.FormatFloat(v, 'f', 2, 64)
		}
		set = append(set, "ocr_key", o.ResultKey, "pages", o.Pages, "words", o.Words,
			"mean_conf", strconv.FormatFloat(o.MeanConfidence, 'f', 2, 64), "page_conf", strings.Join(pc, ","))
	}
	if e := c.Eval; e != nil {
		r, _ := json.Marshal(e.Reasons)
		set = append(set, "score", e.Score, "decision", string(e.Decision), "reasons", string(r))
	}
	if v := c.Verification; v != nil {
		set = append(set, "v_user", v.UserID, "v_result", v.Result, "v_decision", v.Decision,
			"v_score", strconv.FormatFloat(v.Score, 'f', -1, 64), "v_metadata", v.Metadata, "v_ms", v.Time.UnixMilli())
	}
	return set, del
}

// RecordFailure records a retryable failure on a document its job still holds,
// without changing its status (no event: the status did not change).
func (s *Store) RecordFailure(ctx context.Context, id string, ttl time.Duration, token int64, attempts int, msg string) error {
	d, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	res, err := rdb.Decode("doc-transition", docTransitionScript.Run(ctx, s.c, []string{rdb.DocKey(id), rdb.OutboxKey(id)},
		string(d.Status), string(d.Status), "hold", token, s.c.NowMs(), ttl.Milliseconds(), "", "", rdb.ProgressChannel, id, 4,
		"attempts", attempts, "error", rdb.OneLine(msg), "error_ms", s.c.NowMs(), "max_retries", "0"))
	if err != nil {
		return err
	}
	if res.Code == rdb.CodeFenced {
		return &FencedError{Token: token, Current: res.I64(0)}
	}
	return nil
}

// Settled reports whether no more status changes happen to a document on its own: OCR
// reached a decision (a reviewer may still change it) or failed.
func (st Status) Settled() bool {
	switch st {
	case AutoApproved, AutoRejected, NeedsReview, Approved, Rejected, Failed:
		return true
	}
	return false
}

// Get reads a document.
func (s *Store) Get(ctx context.Context, id string) (*Document, error) {
	h, err := s.c.Client.HGetAll(ctx, rdb.DocKey(id)).Result()
	if err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, ErrNotFound
	}
	d := &Document{
		ID: id, Status: Status(h["status"]), Bucket: h["bucket"], Key: h["key"], ContentType: h["ct"],
		Tenant: h["tenant"], CorrelationID: h["corr"], JobID: h["job_id"], JobToken: rdb.I64(h["job_token"]),
		Attempts: int(rdb.I64(h["attempts"])), Reclaims: int(rdb.I64(h["reclaims"])), Error: h["error"],
		ErrorTime: rdb.MsTime(h["error_ms"]), Identity: identityOf(h),
		MaxRetriesExceeded: h["max_retries"] == "1", Created: rdb.MsTime(h["created_ms"]), Updated: rdb.MsTime(h["updated_ms"]),
	}
	if h["ocr_key"] != "" {
		o := &OCRSummary{ResultKey: h["ocr_key"], Pages: int(rdb.I64(h["pages"])), Words: int(rdb.I64(h["words"]))}
		o.MeanConfidence, _ = strconv.ParseFloat(h["mean_conf"], 64)
		if h["page_conf"] != "" {
			for _, v := range strings.Split(h["page_conf"], ",") {
				f, _ := strconv.ParseFloat(v, 64)
				o.PageConfidence = append(o.PageConfidence, f)
			}
		}
		d.OCR = o
	}
	if h["decision"] != "" {
		e := &Evaluation{Score: int(rdb.I64(h["score"])), Decision: Status(h["decision"])}
		_ = json.Unmarshal([]byte(h["reasons"]), &e.Reasons)
		d.Eval = e
	}
	if h["v_result"] != "" {
		v := &Verification{UserID: h["v_user"], Result: h["v_result"], Decision: h["v_decision"],
			Metadata: h["v_metadata"], Time: rdb.MsTime(h["v_ms"])}
		v.Score, _ = strconv.ParseFloat(h["v_score"], 64)
		d.Verification = v
	}
	return d, nil
}
