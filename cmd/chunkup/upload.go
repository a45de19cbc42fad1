package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
)

const uploadKeysHelp = `Keys: each FILE is stored as uploads/ID/NAME (the server's default), or PREFIX/NAME
with --prefix. With -r, each file under a DIR is stored as PREFIX/DIR/RELATIVE/PATH
(PREFIX is uploads/ unless --prefix says otherwise; a / is added when missing). An
object already at a key is replaced.`

const uploadResumeHelp = `Resuming: each upload started is recorded (the file's absolute path, size and
modification time, the server and the key) in $CHUNKUP_STATE_DIR, else
$XDG_STATE_HOME/chunkup, else ~/.local/state/chunkup, but for files of 5 MiB or less
without --direct: those go in one message, which leaves nothing to resume. Uploading the same unchanged
file to the same server and key again resumes that upload: only the chunks the server
lacks are sent. A completed upload is forgotten; one that ended otherwise or expired is
started anew. The upload id is printed on stderr as soon as the upload exists (with
--json, as a first JSON line with the ACTIVE upload on stdout).`

const uploadDirectHelp = `Direct uploads: a server whose operator offers them (serve --direct-above SIZE) gets
files of SIZE or more as direct uploads: their bytes go straight to S3, with URLs the
server signs, and the server still records, checks and completes each one, as with
--direct. --through-server declines the offer (for a client that cannot reach the
store), and aborts a file's interrupted upload that went direct, to begin it anew
through the server; --direct takes a direct upload for every new upload, offered or
not (a file's interrupted upload that began through the server goes on that way, and
the CLI says so).`

const uploadRetryHelp = `Retries: once connected, failures that may pass (the server restarting or busy, a
broken stream, Redis refusing a write) are retried with exponential backoff and jitter,
waiting 100ms doubling up to 5s, until 10 tries in a row make no progress (about 9s);
other failures fail that file at once.`

func upload(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("upload", "upload [flags] FILE... (- for standard input) | upload -r [flags] DIR...")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	fs.notes = append(fs.notes, uploadKeysHelp, uploadResumeHelp, uploadDirectHelp, uploadRetryHelp)
	fs.Lookup("json").Usage = "print JSON lines on stdout: each upload when it starts (ACTIVE), then each final upload"
	contentType := fs.String("content-type", "", "", "content type of the object(s) (default: from each file's extension; the server also looks at the bytes of a file without one)")
	nodeID := fs.String("node-id", "", "", "the document's UUID (one file only; default: the server makes one)")
	connectorID := fs.String("connector-id", "", "", "the connector (source system) the document(s) come from")
	parentID := fs.String("parent-id", "", "", "the document's parent (folder) in its source")
	docPath := fs.String("path", "", "", "the document's path in its source (one file only)")
	drive := fs.String("drive", "", "", "the drive the document(s) are on in their source")
	customMD := fs.String("custom-metadata", "", "", `the document's custom metadata, a JSON object, e.g. {"case":{"id":7}}`)
	key := fs.String("key", "", "", "object key (one file only; default uploads/ID/NAME)")
	prefix := fs.String("prefix", "", "", "key prefix: PREFIX/NAME for each FILE, PREFIX/DIR/RELATIVE/PATH with -r (default with -r: uploads/)")
	recursive := fs.Bool("recursive", "", false, "upload the files under each DIR, keeping their relative paths in the keys")
	fs.BoolVar(recursive, "r", false, "short for --recursive")
	var md metadataFlag
	fs.Var(&md, "metadata", "custom metadata KEY=VALUE of the object(s); repeat the flag for more")
	ifAbsent := fs.Bool("if-absent", "", false, "fail instead of replacing an object that exists at the key (S3's conditional write; an object that appears there meanwhile fails the upload and stays)")
	resume := fs.String("resume", "", "", "continue upload ID with FILE (one file only); chunks the server has are not sent again")
	noResume := fs.Bool("no-resume", "", false, "start new uploads, even where an upload of the same file to the same place was interrupted")
	direct := fs.Bool("direct", "", false, "put the bytes straight into S3 with URLs the server signs (a direct upload: each part's CRC32C checked by S3, the upload still recorded, checked and completed by the server); not for standard input, and slower than an upload through the server for files of a few MiB or less (docs/direct-uploads.md)")
	throughServer := fs.Bool("through-server", "", false, "send the bytes through the server even when it offers a direct upload to S3 for the file's size (its --direct-above): for a client that cannot reach the store")
	keepStale := fs.Bool("keep-stale", "", false, "keep the interrupted upload of a file that changed since it began (by default it is aborted, so its bytes do not wait on the server until it expires)")
	parallel := fs.Int("parallel", "CHUNKUP_PARALLEL", 1, "streams per upload")
	window := fs.Int("window", "CHUNKUP_WINDOW", 4, "unacknowledged chunks per stream (memory: parallel × window × chunk size)")
	jobs := fs.Int("jobs", "", 2, "files uploaded at once")
	progressMode := fs.String("progress", "", "auto", "progress display: auto (bars on a terminal, lines otherwise), bars, lines, none")
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	files := fs.Args()
	prefixGiven := false
	fs.Visit(func(f *flag.Flag) { prefixGiven = prefixGiven || f.Name == "prefix" })
	switch {
	case len(files) == 0 && *recursive:
		return usageError{errors.New("upload -r needs at least one DIR")}
	case len(files) == 0:
		return usageError{errors.New("upload needs at least one FILE")}
	case *key != "" && (len(files) > 1 || *recursive):
		return usageError{errors.New("--key applies to one file only")}
	case *key != "" && prefixGiven:
		return usageError{errors.New("--key and --prefix: give one or the other")}
	case *resume != "" && (len(files) > 1 || *recursive):
		return usageError{errors.New("--resume applies to one file only")}
	case *resume != "" && *noResume:
		return usageError{errors.New("--resume and --no-resume: give one or the other")}
	case *parallel < 1 || *window < 1 || *jobs < 1:
		return usageError{errors.New("--parallel, --window and --jobs must be at least 1")}
	case (*nodeID != "" || *docPath != "") && (len(files) > 1 || *recursive):
		return usageError{errors.New("--node-id and --path name one document: they apply to one file only")}
	}
	doc := client.Document{NodeID: *nodeID, ConnectorID: *connectorID, ParentID: *parentID, Path: *docPath, Drive: *drive}
	if *customMD != "" {
		doc.CustomMetadata = &structpb.Struct{}
		if err := protojson.Unmarshal([]byte(*customMD), doc.CustomMetadata); err != nil {
			return usageError{fmt.Errorf("--custom-metadata: want a JSON object: %w", err)}
		}
	}
	mode, err := progressModeOf(*progressMode, stderr)
	if err != nil {
		return err
	}
	var keyPrefix *string
	if prefixGiven {
		keyPrefix = prefix
	}
	warn := func(msg string) { fmt.Fprintf(stderr, "chunkup: %s\n", msg) }
	todo, err := planUploads(files, *recursive, keyPrefix, *key, warn)
	if err != nil {
		return err
	}
	if len(todo) == 0 {
		// Only a tree can hold nothing: say so rather than exit as if files went up.
		fmt.Fprintf(stderr, "chunkup: no files under %s: nothing to upload\n", strings.Join(files, ", "))
		return nil
	}
	c, err := fs.dial(ctx, *server, client.WithParallel(*parallel), client.WithWindow(*window))
	if err != nil {
		return err
	}
	defer c.Close()

	if *direct && *throughServer {
		return usageError{errors.New("--direct and --through-server contradict each other: --direct puts the bytes straight into S3, --through-server sends them through the server")}
	}
	if *direct && slices.ContainsFunc(todo, func(j uploadJob) bool { return j.path == "-" }) {
		return usageError{errors.New("--direct needs files: standard input's size is not known before it ends, and S3 takes a direct upload's parts by number")}
	}
	r := &uploadRun{c: c, server: *server, resume: *resume, noResume: *noResume, keepStale: *keepStale, asJSON: *asJSON, direct: *direct, throughServer: *throughServer,
		contentType: *contentType, stdout: stdout, stderr: stderr, display: newProgressDisplay(mode, stderr, todo, *recursive)}
	if !*direct && !*throughServer {
		r.opts = append(r.opts, client.WithDirectIfOffered())
	}
	if doc != (client.Document{}) {
		r.opts = append(r.opts, client.WithDocument(doc))
	}
	if len(md.m) > 0 {
		r.opts = append(r.opts, client.WithMetadata(md.m))
	}
	if *ifAbsent {
		r.opts = append(r.opts, client.WithIfAbsent())
	}
	if r.state, err = openResumeState(); err != nil {
		r.stateTrouble(err)
	}
	return r.all(ctx, todo, *jobs)
}

// uploadJob is one file to upload.
type uploadJob struct {
	path string // "-" for standard input
	name string // as shown: the argument, or DIR/RELATIVE/PATH with -r
	key  string // "" for the server's default (uploads/ID/NAME)
	size int64  // -1 for standard input
}

// planUploads turns the arguments into the files to upload, with their keys (see
// uploadKeysHelp; prefix is nil when --prefix was not given), before anything is sent:
// a missing file or two files for one key fail the command at once.
func planUploads(args []string, recursive bool, prefix *string, key string, warn func(string)) ([]uploadJob, error) {
	treePrefix, filePrefix := "uploads/", ""
	if prefix != nil {
		p := *prefix
		if p != "" && !strings.HasSuffix(p, "/") {
			p += "/"
		}
		treePrefix, filePrefix = p, p
	}
	var jobs []uploadJob
	stdin := false
	for _, arg := range args {
		if arg == "-" {
			if stdin {
				return nil, usageError{errors.New("- (standard input) is named twice: it can be read only once")}
			}
			stdin = true
			j := uploadJob{path: arg, name: "stdin", key: key, size: -1}
			if prefix != nil {
				j.key = filePrefix + "stdin"
			}
			jobs = append(jobs, j)
			continue
		}
		fi, err := os.Stat(arg)
		switch {
		case err != nil && strings.HasPrefix(arg, "-") && errors.Is(err, fs.ErrNotExist):
			// The flags end at the first file (flag's rule): a flag after it is read as one.
			return nil, usageError{fmt.Errorf("no file is named %s: flags go before the files (chunkup upload [flags] FILE...)", arg)}
		case err != nil:
			return nil, err
		case fi.IsDir() && !recursive:
			return nil, usageError{fmt.Errorf("%s is a directory: upload -r uploads the files under it", arg)}
		case fi.IsDir():
			tree, err := walkTree(arg, treePrefix, warn)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, tree...)
		case !fi.Mode().IsRegular():
			return nil, fmt.Errorf("%s is not a regular file", arg)
		default:
			j := uploadJob{path: arg, name: arg, key: key, size: fi.Size()}
			if prefix != nil {
				j.key = filePrefix + fi.Name()
			}
			jobs = append(jobs, j)
		}
	}
	byKey := map[string]string{}
	for _, j := range jobs {
		if other, dup := byKey[j.key]; dup && j.key != "" {
			return nil, usageError{fmt.Errorf("%s and %s would both be stored at key %q", other, j.name, j.key)}
		}
		byKey[j.key] = j.name
	}
	return jobs, nil
}

// walkTree lists the regular files under root (and those symbolic links lead to; linked
// directories are not followed, so a cycle cannot trap the walk), keyed
// PREFIX/ROOTNAME/RELATIVE/PATH, in lexical order.
func walkTree(root, prefix string, warn func(string)) ([]uploadJob, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	top := filepath.Base(abs) + "/"
	if top == "//" { // the file system's root
		top = ""
	}
	var jobs []uploadJob
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			warn(path + " links to a directory: not followed")
			return nil
		case !fi.Mode().IsRegular():
			warn(path + " is not a regular file: skipped")
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		jobs = append(jobs, uploadJob{path: path, name: path, key: prefix + top + filepath.ToSlash(rel), size: fi.Size()})
		return nil
	})
	return jobs, err
}

// extensionTypes are the content types of extensions the mime package may not know
// (its built-in table lacks TIFF and HEIC; the system's may be missing altogether).
var extensionTypes = map[string]string{
	".tif": "image/tiff", ".tiff": "image/tiff", ".heic": "image/heic", ".heif": "image/heif",
	".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".pdf": "application/pdf",
	".bmp": "image/bmp", ".gif": "image/gif", ".webp": "image/webp",
}

// typeByExtension is the content type of a file named path by its extension, or "".
// (The server also recognizes a file's type from its first bytes when none is sent.)
func typeByExtension(path string) string {
	ext := strings.ToLower(filepath.Ext(path))
	if ext == "" {
		return ""
	}
	if t, ok := extensionTypes[ext]; ok {
		return t
	}
	return mime.TypeByExtension(ext)
}

// metadataFlag collects repeated --metadata KEY=VALUE.
type metadataFlag struct{ m map[string]string }

func (f *metadataFlag) String() string { return "" }

func (f *metadataFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	if _, dup := f.m[k]; dup {
		return fmt.Errorf("metadata key %q given twice", k)
	}
	if f.m == nil {
		f.m = map[string]string{}
	}
	f.m[k] = v
	return nil
}

// uploadRun uploads the files of one command line.
type uploadRun struct {
	c      serverClient
	server string
	opts   []client.UploadOption // for every file
	// contentType is --content-type; empty: each file's is found from its extension.
	contentType string
	resume      string
	noResume    bool
	keepStale   bool
	asJSON      bool
	direct      bool // --direct
	// throughServer is --through-server: no direct upload, offered or resumed.
	throughServer bool
	display       *progressDisplay
	// state records uploads for resuming; nil when it cannot be kept.
	state          *resumeState
	stateWarn      sync.Once
	stdout, stderr io.Writer
	outMu          sync.Mutex // lines of several uploads on stdout
}

type uploadResult struct {
	up         *chunkupv1.Upload
	err        error
	notStarted bool   // interrupted before its turn
	resumable  string // the upload that failed and that the same command resumes
}

// all uploads the files, jobs at a time, then prints each one's final upload in order
// and, for several files, a summary. It fails when one of them did.
func (r *uploadRun) all(ctx context.Context, todo []uploadJob, jobs int) error {
	start := time.Now()
	results := make([]uploadResult, len(todo))
	var wg sync.WaitGroup
	sem := make(chan struct{}, jobs)
launch:
	for i, j := range todo {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			for k := i; k < len(todo); k++ {
				results[k].notStarted = true
			}
			break launch
		}
		wg.Go(func() {
			defer func() { <-sem }()
			up, resumable, err := r.one(ctx, i, j)
			results[i] = uploadResult{up: up, err: err, resumable: resumable}
		})
	}
	wg.Wait()
	r.display.finish() // results are printed after the bars stop redrawing the terminal
	var done, failed, notStarted, interrupted int
	var bytes int64
	var sig interruption
	for i, res := range results {
		switch {
		case res.notStarted:
			notStarted++
			continue
		case res.err == nil:
			res.err = printUpload(r.stdout, res.up, r.asJSON)
		case errors.As(context.Cause(ctx), &sig):
			// Said once for all (run); the same command resumes these.
			interrupted++
			continue
		}
		if res.err != nil {
			failed++
			msg := describe(res.err)
			// What to do after a failure that passes is what an interrupted run does:
			// the state has the upload.
			if res.resumable != "" && client.Transient(res.err) {
				when := "later"
				if status.Code(res.err) == codes.Unavailable {
					when = "once it is back"
				}
				msg += fmt.Sprintf("; upload %s keeps what the server has: %s, run the same command again to resume it", res.resumable, when)
			}
			fmt.Fprintf(r.stderr, "chunkup: %s: %s\n", todo[i].name, msg)
			continue
		}
		done++
		bytes += res.up.Size
	}
	if len(todo) > 1 {
		took := time.Since(start)
		line := fmt.Sprintf("chunkup: uploaded %d of %d files, %s in %s (%s/s)", done, len(todo),
			sizeString(bytes), took.Round(time.Millisecond), sizeString(int64(float64(bytes)/max(took.Seconds(), 1e-3))))
		if failed > 0 {
			line += fmt.Sprintf("; %d failed", failed)
		}
		if interrupted > 0 {
			line += fmt.Sprintf("; %d interrupted", interrupted)
		}
		if notStarted > 0 {
			line += fmt.Sprintf("; %d not started (interrupted)", notStarted)
		}
		fmt.Fprintln(r.stderr, line)
	}
	if failed+notStarted+interrupted > 0 {
		return fmt.Errorf("%d of %d uploads did not complete", failed+notStarted+interrupted, len(todo))
	}
	return nil
}

// one uploads the i-th file, resuming its interrupted upload to the same place if the
// state records one. When it fails, resumable is the upload the state keeps for the
// same command to resume.
func (r *uploadRun) one(ctx context.Context, i int, j uploadJob) (up *chunkupv1.Upload, resumable string, err error) {
	track := r.display.track(i, j)
	defer func() { track.done(err == nil) }()
	opts := append(slices.Clone(r.opts), client.WithProgress(track.update))
	if j.key != "" {
		opts = append(opts, client.WithKey(j.key))
	}
	if ct := cmp.Or(r.contentType, typeByExtension(j.path)); ct != "" {
		opts = append(opts, client.WithContentType(ct))
	}
	resumeID := r.resume
	// An upload resumed from the state goes on the way it began (direct to S3 or not),
	// whatever this run's --direct says: the server's record says which.
	direct := r.direct
	if resumeID != "" { // --resume ID
		up, err := r.c.Get(ctx, resumeID)
		if err != nil {
			return nil, "", err
		}
		direct = up.Direct
		if direct && r.throughServer && up.State == chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
			return nil, "", fmt.Errorf("upload %s went direct to S3 and goes on only that way: leave out --resume to begin the file anew through the server, or leave out --through-server", resumeID)
		}
		r.throughAlready(j, up)
	}
	var entry *resumeEntry // what identifies this file's upload, for the state
	saved := false         // entry is in the state
	if j.path != "-" {
		fi, err := os.Stat(j.path)
		if err != nil {
			return nil, "", err
		}
		abs, err := filepath.Abs(j.path)
		if err != nil {
			return nil, "", err
		}
		entry = &resumeEntry{Path: abs, Size: fi.Size(), ModTime: fi.ModTime().UTC(), Server: r.server, Key: j.key}
		if resumeID == "" && !r.noResume {
			if resumeID, direct, err = r.resumable(ctx, j, *entry); err != nil {
				return nil, "", err
			}
		}
	}
	if resumeID != "" {
		opts = append(opts, client.WithResume(resumeID))
	}
	opts = append(opts, client.WithOnStart(func(up *chunkupv1.Upload) {
		if entry != nil {
			entry.UploadID = up.UploadId
			direct = direct || up.Direct // a direct upload the server offered
			if recordable(*entry, direct) {
				saved = r.remember(*entry)
			}
		}
		r.announce(j, up, resumeID != "")
		track.start(up)
	}))
	switch {
	case j.path == "-":
		up, err = r.c.Upload(ctx, os.Stdin, append(opts, client.WithName(j.name))...) // size unknown until it ends
	case direct:
		up, err = r.c.UploadFileDirect(ctx, j.path, opts...)
	default:
		up, err = r.c.UploadFile(ctx, j.path, opts...)
	}
	var mismatch *client.MismatchError
	var ended *client.EndedError
	recorded := entry != nil && entry.UploadID != "" && (recordable(*entry, direct) || resumeID != "")
	if recorded && (err == nil || errors.As(err, &mismatch) || errors.As(err, &ended)) {
		r.forget(entry.UploadID) // done with, one way or the other: nothing to resume
	}
	if mismatch != nil && r.resume == "" && resumeID != "" {
		// The state's upload of this file, which its size and time did not tell apart
		// from the file as it is now: a stale upload as one of another size is (not one
		// --resume ID named, which is the caller's to keep).
		r.staleUpload(ctx, j, resumeID, "is not the file upload %s began with", false)
	}
	if err != nil && recorded && mismatch == nil && ended == nil && (r.resume != "" || saved && !r.noResume) {
		resumable = entry.UploadID // the same command finds it (or names it)
	}
	return up, resumable, err
}

// resumable returns the id of an interrupted upload of the file to the same place that
// can go on, or "" to start a new one (with direct as this run asks), and whether that
// upload is direct; else direct as this run asks.
func (r *uploadRun) resumable(ctx context.Context, j uploadJob, e resumeEntry) (id string, direct bool, err error) {
	if r.state == nil {
		return "", r.direct, nil
	}
	id, stale, err := r.state.lookup(e)
	if err != nil {
		r.stateTrouble(err)
		return "", r.direct, nil
	}
	if stale != "" {
		r.staleUpload(ctx, j, stale, "changed since upload %s began", true)
	}
	if id == "" {
		return "", r.direct, nil
	}
	up, err := r.c.Get(ctx, id)
	switch {
	case status.Code(err) == codes.NotFound:
		r.forget(id)
		r.display.println(fmt.Sprintf("chunkup: %s: upload %s is gone (expired?); starting a new one", j.name, id))
		return "", r.direct, nil
	case err != nil:
		return "", r.direct, err
	}
	switch up.State {
	case chunkupv1.UploadState_UPLOAD_STATE_FAILED, chunkupv1.UploadState_UPLOAD_STATE_ABORTED, chunkupv1.UploadState_UPLOAD_STATE_EXPIRED:
		r.forget(id)
		r.display.println(fmt.Sprintf("chunkup: %s: upload %s is %s; starting a new one", j.name, id, stateName(up.State)))
		return "", r.direct, nil
	}
	if up.Direct && r.throughServer && !r.direct && up.State == chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
		// Begun direct (offered), and this run says the store is out of reach: going on
		// would put to it again. Its parts are S3's to drop, so it is aborted, not kept.
		r.forget(id)
		if _, err := r.c.Abort(ctx, id, "the CLI was asked to send the file through the server (--through-server) and started a new upload"); err != nil {
			r.display.println(fmt.Sprintf("chunkup: %s: upload %s went direct to S3; aborting it failed (%s); starting a new one through the server", j.name, id, describe(err)))
		} else {
			r.display.println(fmt.Sprintf("chunkup: %s: upload %s went direct to S3; aborted it, and starting a new one through the server (--through-server)", j.name, id))
		}
		return "", false, nil
	}
	r.throughAlready(j, up)
	return id, up.Direct, nil
}

// throughAlready says, when --direct asks for a direct upload, that resumed upload up
// goes on through the server as it began: its bytes there are kept, not thrown away.
func (r *uploadRun) throughAlready(j uploadJob, up *chunkupv1.Upload) {
	if r.direct && !up.Direct && up.State == chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
		r.display.println(fmt.Sprintf("chunkup: %s: upload %s began through the server and goes on that way (--direct applies to new uploads: 'chunkup abort %s', then upload again, sends the file direct)",
			j.name, up.UploadId, up.UploadId))
	}
}

// staleUpload deals with upload id of j's file begun before the file changed (how says
// so, with a %s for the id): it cannot be resumed with the file as it is now, so unless
// --keep-stale it is aborted rather than left holding its bytes on the server until it
// expires. Either way the CLI says so, and forgets it. anew: this run uploads the file
// anew now (else the next run does).
func (r *uploadRun) staleUpload(ctx context.Context, j uploadJob, id, how string, anew bool) {
	what := j.name + " " + fmt.Sprintf(how, id)
	up, err := r.c.Get(ctx, id)
	switch {
	case status.Code(err) == codes.NotFound:
		r.forget(id) // gone: nothing holds bytes
		return
	case err != nil:
		// Kept in the state, so that the next run deals with it.
		r.display.println(fmt.Sprintf("chunkup: %s, which could not be looked up to abort it: %s", what, describe(err)))
		return
	}
	defer r.forget(id)
	if up.State != chunkupv1.UploadState_UPLOAD_STATE_ACTIVE {
		return // ended: nothing holds bytes
	}
	held := fmt.Sprintf("%s on the server", strings.TrimSpace(sizeString(up.ReceivedBytes)))
	if r.keepStale {
		r.display.println(fmt.Sprintf("chunkup: %s; keeping it (%s) as --keep-stale asks: 'chunkup abort %s' discards it", what, held, id))
		return
	}
	reason, next := "the file changed since the upload began; the CLI started a new upload of it", " and starting anew"
	if !anew {
		reason, next = "the file is not the one the upload began with; the CLI aborted it", "; run the same command again to upload the file anew"
	}
	if _, err := r.c.Abort(ctx, id, reason); err != nil {
		r.display.println(fmt.Sprintf("chunkup: %s (%s); aborting it failed: %s", what, held, describe(err)))
		return
	}
	r.display.println(fmt.Sprintf("chunkup: %s; aborted it (%s)%s (--keep-stale keeps such uploads)", what, held, next))
}

// announce says that upload up of j exists, as soon as it does: its id is what resumes
// it.
func (r *uploadRun) announce(j uploadJob, up *chunkupv1.Upload, resumed bool) {
	if r.asJSON {
		r.outMu.Lock()
		defer r.outMu.Unlock()
		if err := printUpload(r.stdout, up, true); err != nil {
			r.display.println("chunkup: " + err.Error())
		}
		return
	}
	if !resumed {
		how := "" // through the server, as every upload went before direct ones
		if up.Direct {
			how = ", direct to S3"
		}
		r.display.println(fmt.Sprintf("chunkup: %s: upload %s started%s", j.name, up.UploadId, how))
		return
	}
	of := ""
	if up.ExpectedSize >= 0 {
		of = fmt.Sprintf(" of %d", up.ExpectedSize)
	}
	if up.Direct {
		// The server learns of a direct upload's parts only when it completes: the
		// parts S3 holds are listed (and skipped) as the upload goes on.
		r.display.println(fmt.Sprintf("chunkup: %s: resuming direct upload %s (parts S3 holds already are not put again)", j.name, up.UploadId))
		return
	}
	r.display.println(fmt.Sprintf("chunkup: %s: resuming upload %s (%d%s bytes on the server)", j.name, up.UploadId, up.ReceivedBytes, of))
}

// remember records e in the state, and says whether it is there.
func (r *uploadRun) remember(e resumeEntry) bool {
	if r.state == nil {
		return false
	}
	err := r.state.record(e)
	r.stateTrouble(err)
	return err == nil
}

func (r *uploadRun) forget(id string) {
	if r.state != nil {
		r.stateTrouble(r.state.drop(id))
	}
}

// stateTrouble warns once that uploads cannot be recorded for resuming; they go on.
func (r *uploadRun) stateTrouble(err error) {
	if err != nil {
		r.stateWarn.Do(func() {
			r.display.println(fmt.Sprintf("chunkup: warning: cannot record uploads for resuming them later: %v", err))
		})
	}
}
