package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/term"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/chunkup/chunkup/app"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

const ocrUsage = `usage: chunkup ocr COMMAND [flags]

commands:
  status DOC [--text]        print a document's OCR and review state (and its text)
  watch DOC                  print a document's status changes until it is settled
  reprocess DOC [--force]    put a document on the OCR queue again
  stats                      print the OCR queue's counters and its workers' engines
  dead list [--limit N]      list dead-lettered jobs with their error history
  dead requeue JOB...|--all  put dead-lettered jobs back on the queue
  purge QUEUE [--yes]        empty the pending, delayed or dead jobs (asks first)

DOC is the document's upload id or its node id (a UUID). Every command talks to the
server at --server (default 127.0.0.1:7070, chunkup dev's), through its
DocumentService API: status, watch and reprocess see the caller's tenant's documents;
stats, dead and purge span every tenant and need an admin tenant (--admin-tenants on
the server; anyone when authentication is off, as in chunkup dev).
`

// ocrCommands are ocr's commands; the admin commands' names are one or two words.
func ocrCommands() []command {
	return []command{
		{"status", "print a document's OCR and review state", ocrStatus},
		{"watch", "print a document's status changes until it is settled", ocrWatch},
		{"reprocess", "enqueue a document again", ocrReprocess},
		{"stats", "print the OCR queue's counters and workers", ocrStats},
		{"dead list", "list dead-lettered jobs", ocrDeadList},
		{"dead requeue", "put dead-lettered jobs back on the queue", ocrDeadRequeue},
		{"purge", "empty a part of the OCR queue", ocrPurge},
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
	case args[0] == "dead" && (args[1] == "-h" || args[1] == "--help"):
		fmt.Fprint(stdout, ocrUsage)
		return nil
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

// ocrCall is one ocr command's parsed flags and its connection to the server.
type ocrCall struct {
	api    chunkupv1.DocumentServiceClient
	conn   *grpc.ClientConn
	asJSON bool
	stdout io.Writer
}

// ocrSetup adds the client flags to fs, parses args and connects; want is how many
// positional arguments the command takes (-1: any number).
func ocrSetup(ctx context.Context, fs *flagSet, args []string, want int, what string, stdout, stderr io.Writer) (*ocrCall, []string, error) {
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	pos, err := parseAll(fs, args)
	if err != nil {
		return nil, nil, usageErr(err)
	}
	if want >= 0 && len(pos) != want {
		return nil, nil, usageError{fmt.Errorf("%s", what)}
	}
	conn, err := fs.conn(ctx, *server)
	if err != nil {
		return nil, nil, err
	}
	return &ocrCall{api: chunkupv1.NewDocumentServiceClient(conn), conn: conn, asJSON: *asJSON, stdout: stdout}, pos, nil
}

func (c *ocrCall) close() { c.conn.Close() }

// printProto prints m as one line of compact JSON with the proto field names.
// protojson's own output is deliberately unstable (it adds spaces at random, so that no
// one compares its bytes); a script reading the CLI's output should get the same bytes
// for the same message, as docs/cli.md shows them.
func printProto(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

func docStatus(s chunkupv1.DocumentStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "DOCUMENT_STATUS_"))
}

func ocrStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr status", "ocr status [flags] DOCUMENT_ID")
	text := fs.Bool("text", "", false, "also print the recognized text, page by page (at most 256 KiB; the full result's S3 key is printed)")
	c, pos, err := ocrSetup(ctx, fs, args, 1, "ocr status needs exactly one DOCUMENT_ID (upload id or node id)", stdout, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	r, err := c.api.GetDocument(ctx, &chunkupv1.GetDocumentRequest{DocumentId: pos[0], IncludeText: *text})
	if err != nil {
		return fmt.Errorf("ocr status: %w", err)
	}
	d := r.GetDocument()
	if c.asJSON {
		return printProto(stdout, d)
	}
	printDocument(stdout, d)
	if t := d.Text; t != nil {
		for _, p := range t.Pages {
			fmt.Fprintf(stdout, "--- page %d: %d words, mean confidence %.1f\n%s\n", p.Page, p.Words, p.MeanConfidence, p.Text)
		}
		if t.Truncated {
			fmt.Fprintf(stdout, "--- (text cut at 256 KiB; the full result is s3://%s/%s)\n", d.Bucket, t.ResultKey)
		}
	} else if *text && d.Ocr == nil {
		fmt.Fprintf(stdout, "  (no text yet: the document is %s)\n", docStatus(d.Status))
	}
	return nil
}

// printDocument prints a document in a few lines.
func printDocument(w io.Writer, d *chunkupv1.Document) {
	fmt.Fprintf(w, "%s %s s3://%s/%s node=%s job=%s attempts=%d", d.DocumentId, docStatus(d.Status), d.Bucket, d.Key, d.NodeId, d.JobId, d.Attempts)
	if d.Reclaims > 0 {
		fmt.Fprintf(w, " reclaims=%d", d.Reclaims)
	}
	fmt.Fprintln(w)
	if o := d.Ocr; o != nil {
		fmt.Fprintf(w, "  ocr: %s, %s, mean confidence %.1f, result s3://%s/%s\n", plural(int64(o.Pages), "page"), plural(int64(o.Words), "word"), o.MeanConfidence, d.Bucket, o.ResultKey)
	}
	if e := d.Evaluation; e != nil {
		fmt.Fprintf(w, "  evaluation: score %d, %s %v\n", e.Score, e.Decision, e.Reasons)
	}
	if v := d.Verification; v != nil {
		fmt.Fprintf(w, "  verification: %s by %s\n", v.Result, v.UserId)
	}
	if d.Error != "" {
		fmt.Fprintf(w, "  error: %s (max retries exceeded: %v)\n", d.Error, d.MaxRetriesExceeded)
	}
}

func ocrWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr watch", "ocr watch [flags] DOCUMENT_ID")
	fs.notes = append(fs.notes, "Prints the document, then the document at each status change, until it is settled (a decision, or failed). Exits 1 if it failed.")
	c, pos, err := ocrSetup(ctx, fs, args, 1, "ocr watch needs exactly one DOCUMENT_ID (upload id or node id)", stdout, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	stream, err := c.api.WatchDocument(ctx, &chunkupv1.WatchDocumentRequest{DocumentId: pos[0]})
	if err != nil {
		return fmt.Errorf("ocr watch: %w", err)
	}
	var last *chunkupv1.Document
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("ocr watch: %w", err)
		}
		last = r.Document
		if c.asJSON {
			if err := printProto(stdout, last); err != nil {
				return err
			}
			continue
		}
		printDocument(stdout, last)
	}
	if last != nil && last.Status == chunkupv1.DocumentStatus_DOCUMENT_STATUS_FAILED {
		return fmt.Errorf("document %s failed: %s", last.DocumentId, last.Error)
	}
	return nil
}

func ocrReprocess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr reprocess", "ocr reprocess [flags] DOCUMENT_ID")
	force := fs.Bool("force", "", false, "process it again even if it was processed or is queued")
	c, pos, err := ocrSetup(ctx, fs, args, 1, "ocr reprocess needs exactly one DOCUMENT_ID (upload id or node id)", stdout, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	r, err := c.api.ReprocessDocument(ctx, &chunkupv1.ReprocessDocumentRequest{DocumentId: pos[0], Force: *force})
	if err != nil {
		return fmt.Errorf("ocr reprocess: %w", err)
	}
	if c.asJSON {
		return printProto(stdout, r)
	}
	if !r.Enqueued {
		fmt.Fprintf(stdout, "%s not enqueued: the document has job %s already (use --force to process it again)\n", r.Document.GetDocumentId(), r.JobId)
		return nil
	}
	fmt.Fprintf(stdout, "%s enqueued as job %s\n", r.Document.GetDocumentId(), r.JobId)
	return nil
}

func ocrStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr stats", "ocr stats [flags]")
	c, _, err := ocrSetup(ctx, fs, args, 0, "ocr stats takes no arguments", stdout, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	st, err := c.api.GetOCRStats(ctx, &chunkupv1.GetOCRStatsRequest{})
	if err != nil {
		return fmt.Errorf("ocr stats: %w", err)
	}
	if c.asJSON {
		return printProto(stdout, st)
	}
	fmt.Fprintf(stdout, "queue: %d pending, %d in flight, %d delayed, %d dead; oldest pending %s\n",
		st.Pending, st.InFlight, st.Delayed, st.Dead, st.OldestPendingAge.AsDuration().Round(time.Millisecond))
	if len(st.Workers) == 0 {
		fmt.Fprintln(stdout, "workers: none reporting (no process runs the ocr role with OCR on)")
	}
	for _, w := range st.Workers {
		health := "healthy"
		if !w.EngineHealthy {
			health = "UNAVAILABLE: " + w.EngineError
		}
		engine := w.Engine
		if w.ActiveEngine != w.Engine {
			engine += " (jobs on " + w.ActiveEngine + ")"
		}
		fmt.Fprintf(stdout, "worker %s: running, engine %s %s, fallback %v, processing %d of %d, %d processed, reported %s ago\n",
			w.InstanceId, engine, health, w.Fallback, w.Processing, w.Concurrency, w.Processed,
			time.Since(w.ReportTime.AsTime()).Round(time.Second))
	}
	return nil
}

func ocrDeadList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr dead list", "ocr dead list [flags]")
	limit := fs.Int("limit", "", 100, "list at most this many jobs (at most 1000)")
	c, _, err := ocrSetup(ctx, fs, args, 0, "ocr dead list takes no arguments", stdout, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	r, err := c.api.ListDeadJobs(ctx, &chunkupv1.ListDeadJobsRequest{PageSize: int32(*limit)})
	if err != nil {
		return fmt.Errorf("ocr dead list: %w", err)
	}
	if c.asJSON {
		return printProto(stdout, r)
	}
	fmt.Fprintf(stdout, "%d dead-lettered jobs\n", r.Total)
	for _, j := range r.Jobs {
		fmt.Fprintf(stdout, "%s document %s attempts=%d reclaims=%d died %s: %s\n", j.JobId, j.DocumentId, j.Attempts, j.Reclaims,
			j.DeadTime.AsTime().Format(time.RFC3339), j.Reason)
		for _, e := range j.Errors {
			fmt.Fprintf(stdout, "  %s attempt %d: %s\n", e.Time.AsTime().Format(time.RFC3339), e.Attempt, e.Error)
		}
	}
	return nil
}

func ocrDeadRequeue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr dead requeue", "ocr dead requeue [flags] JOB_ID... | --all")
	all := fs.Bool("all", "", false, "requeue every dead-lettered job")
	c, pos, err := ocrSetup(ctx, fs, args, -1, "", stdout, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	if *all == (len(pos) > 0) {
		return usageError{errors.New("ocr dead requeue needs JOB_IDs or --all (not both)")}
	}
	r, err := c.api.RequeueDeadJobs(ctx, &chunkupv1.RequeueDeadJobsRequest{JobIds: pos, All: *all})
	if err != nil {
		return fmt.Errorf("ocr dead requeue: %w", err)
	}
	if c.asJSON {
		return printProto(stdout, r)
	}
	fmt.Fprintf(stdout, "requeued %d jobs\n", r.Requeued)
	return nil
}

// stdin is where purge reads its confirmation (a variable, for tests).
var stdin io.Reader = os.Stdin

var purgeQueues = map[string]chunkupv1.OCRQueueSet{
	"pending": chunkupv1.OCRQueueSet_OCR_QUEUE_SET_PENDING,
	"delayed": chunkupv1.OCRQueueSet_OCR_QUEUE_SET_DELAYED,
	"dead":    chunkupv1.OCRQueueSet_OCR_QUEUE_SET_DEAD,
}

func ocrPurge(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("ocr purge", "ocr purge [flags] pending|delayed|dead")
	fs.notes = append(fs.notes, `Removes every job of one part of the OCR queue: pending (waiting for a worker),
delayed (waiting for a retry) or dead (dead-lettered). The documents of purged pending
and delayed jobs are marked failed; chunkup ocr reprocess DOC puts one back. Jobs in
flight are never purged. It asks you to type the queue's name first, unless --yes.`)
	yes := fs.Bool("yes", "", false, "do not ask for confirmation")
	c, pos, err := ocrSetup(ctx, fs, args, 1, "ocr purge needs one QUEUE: pending, delayed or dead", stdout, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	set, ok := purgeQueues[pos[0]]
	if !ok {
		return usageError{fmt.Errorf("ocr purge: unknown queue %q (pending, delayed or dead)", pos[0])}
	}
	if !*yes {
		st, err := c.api.GetOCRStats(ctx, &chunkupv1.GetOCRStatsRequest{})
		if err != nil {
			return fmt.Errorf("ocr purge: %w", err)
		}
		n := map[string]int64{"pending": st.Pending, "delayed": st.Delayed, "dead": st.Dead}[pos[0]]
		if f, isFile := stdin.(*os.File); isFile && !term.IsTerminal(int(f.Fd())) {
			return usageError{errors.New("ocr purge asks for confirmation on a terminal; pass --yes to purge without asking")}
		}
		fmt.Fprintf(stderr, "Purge %d %s OCR jobs? ", n, pos[0])
		if pos[0] != "dead" {
			fmt.Fprint(stderr, "Their documents will be marked failed. ")
		}
		fmt.Fprintf(stderr, "Type %q to confirm: ", pos[0])
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if strings.TrimSpace(line) != pos[0] {
			return errors.New("ocr purge: not confirmed; nothing purged")
		}
	}
	r, err := c.api.PurgeQueue(ctx, &chunkupv1.PurgeQueueRequest{Queue: set})
	if err != nil {
		return fmt.Errorf("ocr purge: %w", err)
	}
	if c.asJSON {
		return printProto(stdout, r)
	}
	fmt.Fprintf(stdout, "purged %d %s jobs\n", r.Purged, pos[0])
	return nil
}

// ocrFlags adds serve's OCR flags to fs; the returned function applies them to cfg.
func ocrFlags(fs *flagSet) func(cfg *app.Config) error {
	enabled := fs.Bool("ocr", "CHUNKUP_OCR", true, "hand completed image and PDF uploads to OCR and run OCR workers (ocr role)")
	applyEngine := ocrEngineFlags(fs)
	conc := fs.Int("ocr-concurrency", "CHUNKUP_OCR_CONCURRENCY", 2, "OCR jobs run at once per process")
	lease := fs.Duration("ocr-lease", "CHUNKUP_OCR_LEASE", 0, "OCR job lease: a dead worker's job is reclaimed this long after its last renewal (default 5m)")
	attempts := fs.Int("ocr-max-attempts", "CHUNKUP_OCR_MAX_ATTEMPTS", 0, "failed attempts before an OCR job is dead-lettered (default 3)")
	reclaims := fs.Int("ocr-max-reclaims", "CHUNKUP_OCR_MAX_RECLAIMS", 0, "times an OCR job may be taken back from a worker that died holding it before it is dead-lettered (default 3)")
	backoff := fs.Duration("ocr-backoff", "CHUNKUP_OCR_BACKOFF", 0, "first OCR retry wait, tripled each time (default 3s)")
	reap := fs.Duration("ocr-reap-interval", "CHUNKUP_OCR_REAP_INTERVAL", 0, "how often retries are promoted and expired leases reclaimed (default 1s)")
	docTTL := fs.Duration("ocr-document-ttl", "CHUNKUP_OCR_DOCUMENT_TTL", 0, "how long document state is kept after its last change (default 720h)")
	minConf := fs.Int("ocr-min-confidence", "CHUNKUP_OCR_MIN_CONFIDENCE", 0, "mean word confidence below which nothing is approved automatically (default 60)")
	minWords := fs.Int("ocr-min-words", "CHUNKUP_OCR_MIN_WORDS", 0, "words below which nothing is approved automatically (default 3)")
	patterns := fs.String("ocr-required-patterns", "CHUNKUP_OCR_REQUIRED_PATTERNS", "", `JSON array of regular expressions the text must match, e.g. ["(?i)invoice"]`)
	approve := fs.Int("ocr-approve-score", "CHUNKUP_OCR_APPROVE_SCORE", 0, "lowest score approved automatically (default 80)")
	reject := fs.Int("ocr-reject-score", "CHUNKUP_OCR_REJECT_SCORE", 0, "scores below this are rejected automatically (default 30)")
	key := fs.String("service-internal-key", "CHUNKUP_SERVICE_INTERNAL_KEY", "", "x-service-key of the verification webhook (empty: the webhook answers 503); prefer the environment variable")
	return func(cfg *app.Config) error {
		o := &cfg.OCR
		o.Enabled, o.Concurrency, o.Lease, o.MaxAttempts, o.BackoffBase = *enabled, *conc, *lease, *attempts, *backoff
		o.MaxReclaims, o.ReapInterval, o.DocumentTTL, o.ServiceKey = *reclaims, *reap, *docTTL, *key
		o.Rules.MinMeanConfidence, o.Rules.MinWords = float64(*minConf), *minWords
		o.Rules.ApproveScore, o.Rules.RejectScore = *approve, *reject
		if *patterns != "" {
			if err := json.Unmarshal([]byte(*patterns), &o.Rules.RequiredPatterns); err != nil {
				return fmt.Errorf("--ocr-required-patterns: want a JSON array of strings: %w", err)
			}
		}
		applyEngine(o)
		return nil
	}
}

// ocrEngineFlags adds the OCR engine's flags (serve's and dev's) to fs; the returned
// function applies them.
func ocrEngineFlags(fs *flagSet) func(o *app.OCRConfig) {
	tessPath := fs.String("tesseract-path", "CHUNKUP_TESSERACT_PATH", "tesseract", "tesseract binary")
	tessLang := fs.String("tesseract-lang", "CHUNKUP_TESSERACT_LANG", "eng", "tesseract language(s), e.g. eng+deu")
	tessTimeout := fs.Duration("tesseract-timeout", "CHUNKUP_TESSERACT_TIMEOUT", 0, "limit on one document's OCR (default 2m)")
	pdftoppm := fs.String("pdftoppm-path", "CHUNKUP_PDFTOPPM_PATH", "pdftoppm", "pdftoppm binary (poppler-utils) for PDFs")
	engineURL := fs.String("ocr-engine-url", "CHUNKUP_OCR_ENGINE_URL", "", "base URL of a remote OCR engine (POST /v1/recognize, GET /healthz; docs/ocr.md); empty: tesseract")
	fallback := fs.Bool("ocr-engine-fallback", "CHUNKUP_OCR_ENGINE_FALLBACK", true, "run jobs on tesseract while the remote engine is unavailable (false: they wait)")
	engineTimeout := fs.Duration("ocr-engine-timeout", "CHUNKUP_OCR_ENGINE_TIMEOUT", 0, "limit on one remote recognition (default 2m)")
	probe := fs.Duration("ocr-engine-probe-interval", "CHUNKUP_OCR_ENGINE_PROBE_INTERVAL", 0, "how often an unavailable remote engine is checked again (default 10s)")
	return func(o *app.OCRConfig) {
		o.Tesseract.Path, o.Tesseract.Lang, o.Tesseract.Timeout, o.Tesseract.PdftoppmPath = *tessPath, *tessLang, *tessTimeout, *pdftoppm
		o.Remote.URL, o.Remote.Timeout, o.NoFallback, o.ProbeInterval = *engineURL, *engineTimeout, !*fallback, *probe
	}
}
