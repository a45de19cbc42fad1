package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/chunkup/chunkup/app"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/ocr"
)

const ocrUsage = `usage: chunkup ocr COMMAND [flags]

commands:
  status DOC                 print a document's OCR and review state (gRPC, --server)
  stats                      print the OCR queue's counters (Redis, --redis-url)
  dead list                  list dead-lettered jobs with their error history (Redis)
  dead requeue JOB|--all     put dead-lettered jobs back on the queue (Redis)
  reprocess DOC [--force]    enqueue a document again; --force even if processed (Redis)

The admin commands other than status talk to Redis directly (--redis-url or
$CHUNKUP_REDIS_URL), so they work while no server runs.
`

// ocrCommands are ocr's commands; the admin commands' names are one or two words.
func ocrCommands() []command {
	return []command{
		{"status", "print a document's OCR and review state", ocrStatus},
		{"stats", "print the OCR queue's counters", ocrStats},
		{"dead list", "list dead-lettered jobs", ocrDeadList},
		{"dead requeue", "put dead-lettered jobs back on the queue", ocrDeadRequeue},
		{"reprocess", "enqueue a document again", ocrReprocess},
	}
}

// ocrCmd runs `chunkup ocr ...`.
func ocrCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("ocr needs a command\n\n" + ocrUsage)}
	}
	for _, c := range ocrCommands() {
		if words := strings.Fields(c.name); len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return c.run(ctx, args[len(words):], stdout, stderr)
		}
	}
	switch {
	case args[0] == "dead" && len(args) < 2:
		return usageError{errors.New("ocr dead needs list or requeue")}
	case args[0] == "dead":
		return usageError{fmt.Errorf("ocr dead: unknown command %q (list, requeue)", args[1])}
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, ocrUsage)
		return nil
	}
	return usageError{fmt.Errorf("ocr: unknown command %q\n\n%s", args[0], ocrUsage)}
}

// parseAll parses flags wherever they are among the arguments (the flag package stops
// at the first argument that is not a flag, and `ocr reprocess DOC --force` is the
// documented form) and returns the other arguments.
func parseAll(fs *flagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

func ocrStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr status", "ocr status [flags] DOCUMENT_ID")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	pos, err := parseAll(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) != 1 {
		return usageError{errors.New("ocr status needs exactly one DOCUMENT_ID (the upload id)")}
	}
	conn, err := fs.conn(ctx, *server)
	if err != nil {
		return err
	}
	defer conn.Close()
	r, err := chunkupv1.NewDocumentServiceClient(conn).GetDocument(ctx, &chunkupv1.GetDocumentRequest{DocumentId: pos[0]})
	if err != nil {
		return fmt.Errorf("ocr status: %w", err)
	}
	d := r.GetDocument()
	if *asJSON {
		b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(d)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	fmt.Fprintf(stdout, "%s %s s3://%s/%s job=%s attempts=%d\n", d.DocumentId, d.Status, d.Bucket, d.Key, d.JobId, d.Attempts)
	if o := d.Ocr; o != nil {
		fmt.Fprintf(stdout, "  ocr: %d pages, %d words, mean confidence %.1f, result s3://%s/%s\n", o.Pages, o.Words, o.MeanConfidence, d.Bucket, o.ResultKey)
	}
	if e := d.Evaluation; e != nil {
		fmt.Fprintf(stdout, "  evaluation: score %d, %s %v\n", e.Score, e.Decision, e.Reasons)
	}
	if v := d.Verification; v != nil {
		fmt.Fprintf(stdout, "  verification: %s by %s\n", v.Result, v.UserId)
	}
	if d.Error != "" {
		fmt.Fprintf(stdout, "  error: %s (max retries exceeded: %v)\n", d.Error, d.MaxRetriesExceeded)
	}
	return nil
}

// adminQueue connects to Redis from --redis-url for the admin commands.
func adminQueue(fs *flagSet) func() (*ocr.Queue, func(), error) {
	redisURL := fs.String("redis-url", "CHUNKUP_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL")
	return func() (*ocr.Queue, func(), error) {
		q, done, err := app.OCRAdmin(*redisURL)
		if err != nil && strings.HasPrefix(err.Error(), "redis url:") {
			return nil, nil, usageError{err}
		}
		return q, done, err
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func ocrStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr stats", "ocr stats [flags]")
	fs.SetOutput(stderr)
	connect := adminQueue(fs)
	pos, err := parseAll(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) > 0 {
		return usageError{fmt.Errorf("ocr stats takes no arguments, got %q", pos)}
	}
	q, done, err := connect()
	if err != nil {
		return err
	}
	defer done()
	st, err := q.Stats(ctx)
	if err != nil {
		return fmt.Errorf("ocr stats: %w", err)
	}
	return printJSON(stdout, map[string]any{"pending": st.Pending, "in_flight": st.InFlight, "delayed": st.Delayed,
		"dead": st.Dead, "oldest_age_seconds": st.OldestAge.Seconds()})
}

type deadJobLine struct {
	JobID         string         `json:"job_id"`
	DocumentID    string         `json:"document_id"`
	CorrelationID string         `json:"correlation_id"`
	Attempts      int            `json:"attempts"`
	Reason        string         `json:"reason"`
	Died          time.Time      `json:"died"`
	Errors        []deadJobError `json:"errors"`
}

type deadJobError struct {
	Time    time.Time `json:"time"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
}

func ocrDeadList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr dead list", "ocr dead list [flags]")
	fs.SetOutput(stderr)
	connect := adminQueue(fs)
	limit := fs.Int("limit", "", 100, "list at most this many jobs")
	pos, err := parseAll(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) > 0 {
		return usageError{fmt.Errorf("ocr dead list takes no arguments, got %q", pos)}
	}
	q, done, err := connect()
	if err != nil {
		return err
	}
	defer done()
	jobs, total, err := q.Dead(ctx, 0, int64(*limit))
	if err != nil {
		return fmt.Errorf("ocr dead list: %w", err)
	}
	out := struct {
		Total int64         `json:"total"`
		Jobs  []deadJobLine `json:"jobs"`
	}{Total: total, Jobs: []deadJobLine{}}
	for _, j := range jobs {
		l := deadJobLine{JobID: j.ID, DocumentID: j.DocumentID, CorrelationID: j.CorrelationID, Attempts: j.Attempts,
			Reason: j.DeadReason, Died: j.Died, Errors: []deadJobError{}}
		for _, e := range j.Errors {
			l.Errors = append(l.Errors, deadJobError{Time: e.Time, Attempt: e.Attempt, Error: e.Error})
		}
		out.Jobs = append(out.Jobs, l)
	}
	return printJSON(stdout, out)
}

func ocrDeadRequeue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr dead requeue", "ocr dead requeue [flags] JOB_ID... | --all")
	fs.SetOutput(stderr)
	connect := adminQueue(fs)
	all := fs.Bool("all", "", false, "requeue every dead-lettered job")
	pos, err := parseAll(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if *all == (len(pos) > 0) {
		return usageError{errors.New("ocr dead requeue needs JOB_IDs or --all (not both)")}
	}
	q, done, err := connect()
	if err != nil {
		return err
	}
	defer done()
	n := 0
	if *all {
		if n, err = q.RequeueAll(ctx); err != nil {
			return fmt.Errorf("ocr dead requeue: %w", err)
		}
	}
	for _, id := range pos {
		if err := q.Requeue(ctx, id); err != nil {
			return fmt.Errorf("ocr dead requeue: %w", err)
		}
		n++
	}
	return printJSON(stdout, map[string]int{"requeued": n})
}

func ocrReprocess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr reprocess", "ocr reprocess [flags] DOCUMENT_ID")
	fs.SetOutput(stderr)
	connect := adminQueue(fs)
	force := fs.Bool("force", "", false, "process it again even if it was processed or is queued")
	pos, err := parseAll(fs, args)
	if err != nil {
		return usageErr(err)
	}
	if len(pos) != 1 {
		return usageError{errors.New("ocr reprocess needs exactly one DOCUMENT_ID")}
	}
	q, done, err := connect()
	if err != nil {
		return err
	}
	defer done()
	jobID, isNew, err := q.Reprocess(ctx, pos[0], *force)
	if err != nil {
		return fmt.Errorf("ocr reprocess: %w", err)
	}
	msg := "enqueued"
	if !isNew {
		msg = "not enqueued: the document has a job already (use --force to process it again)"
	}
	return printJSON(stdout, map[string]any{"document_id": pos[0], "job_id": jobID, "enqueued": isNew, "message": msg})
}

// ocrFlags adds serve's OCR flags to fs; the returned function applies them to cfg.
func ocrFlags(fs *flagSet) func(cfg *app.Config) error {
	enabled := fs.Bool("ocr", "CHUNKUP_OCR", true, "hand completed image and PDF uploads to OCR and run OCR workers (ocr role)")
	conc := fs.Int("ocr-concurrency", "CHUNKUP_OCR_CONCURRENCY", 2, "OCR jobs run at once per process")
	lease := fs.Duration("ocr-lease", "CHUNKUP_OCR_LEASE", 0, "OCR job lease: a dead worker's job is reclaimed this long after its last renewal (default 5m)")
	attempts := fs.Int("ocr-max-attempts", "CHUNKUP_OCR_MAX_ATTEMPTS", 0, "failed attempts before an OCR job is dead-lettered (default 3)")
	backoff := fs.Duration("ocr-backoff", "CHUNKUP_OCR_BACKOFF", 0, "first OCR retry wait, tripled each time (default 3s)")
	reap := fs.Duration("ocr-reap-interval", "CHUNKUP_OCR_REAP_INTERVAL", 0, "how often retries are promoted and expired leases reclaimed (default 1s)")
	docTTL := fs.Duration("ocr-document-ttl", "CHUNKUP_OCR_DOCUMENT_TTL", 0, "how long document state is kept after its last change (default 720h)")
	tessPath := fs.String("tesseract-path", "CHUNKUP_TESSERACT_PATH", "tesseract", "tesseract binary")
	tessLang := fs.String("tesseract-lang", "CHUNKUP_TESSERACT_LANG", "eng", "tesseract language(s), e.g. eng+deu")
	tessTimeout := fs.Duration("tesseract-timeout", "CHUNKUP_TESSERACT_TIMEOUT", 0, "limit on one document's OCR (default 2m)")
	pdftoppm := fs.String("pdftoppm-path", "CHUNKUP_PDFTOPPM_PATH", "pdftoppm", "pdftoppm binary (poppler-utils) for PDFs")
	minConf := fs.Int("ocr-min-confidence", "CHUNKUP_OCR_MIN_CONFIDENCE", 0, "mean word confidence below which nothing is approved automatically (default 60)")
	minWords := fs.Int("ocr-min-words", "CHUNKUP_OCR_MIN_WORDS", 0, "words below which nothing is approved automatically (default 3)")
	patterns := fs.String("ocr-required-patterns", "CHUNKUP_OCR_REQUIRED_PATTERNS", "", `JSON array of regular expressions the text must match, e.g. ["(?i)invoice"]`)
	approve := fs.Int("ocr-approve-score", "CHUNKUP_OCR_APPROVE_SCORE", 0, "lowest score approved automatically (default 80)")
	reject := fs.Int("ocr-reject-score", "CHUNKUP_OCR_REJECT_SCORE", 0, "scores below this are rejected automatically (default 30)")
	key := fs.String("service-internal-key", "CHUNKUP_SERVICE_INTERNAL_KEY", "", "x-service-key of the verification webhook (empty: the webhook answers 503); prefer the environment variable")
	return func(cfg *app.Config) error {
		o := &cfg.OCR
		o.Enabled, o.Concurrency, o.Lease, o.MaxAttempts, o.BackoffBase = *enabled, *conc, *lease, *attempts, *backoff
		o.ReapInterval, o.DocumentTTL, o.ServiceKey = *reap, *docTTL, *key
		o.Tesseract.Path, o.Tesseract.Lang, o.Tesseract.Timeout, o.Tesseract.PdftoppmPath = *tessPath, *tessLang, *tessTimeout, *pdftoppm
		o.Rules.MinMeanConfidence, o.Rules.MinWords = float64(*minConf), *minWords
		o.Rules.ApproveScore, o.Rules.RejectScore = *approve, *reject
		if *patterns != "" {
			if err := json.Unmarshal([]byte(*patterns), &o.Rules.RequiredPatterns); err != nil {
				return fmt.Errorf("--ocr-required-patterns: want a JSON array of strings: %w", err)
			}
		}
		return nil
	}
}
