// Command chunkup runs the chunkup service and talks to it.
//
//	chunkup serve                      run every role (or --roles api,worker,completer,…)
//	chunkup dev                        run everything with embedded Redis, S3 and Kafka
//	chunkup upload --server ADDR FILE  upload files and print the final uploads
//	chunkup upload -r DIR              upload a tree, keys keeping the relative paths
//	chunkup status --server ADDR ID    print an upload's state
//	chunkup ls [PREFIX]                list your objects (--uploads: uploads in progress)
//	chunkup get ID|KEY [FILE|-]        download a completed object, checked by CRC32C
//	chunkup get -r PREFIX [DIR]        download every object under a prefix
//	chunkup stat KEY                   print what is known of an object
//	chunkup rm KEY... | rm -r PREFIX   delete objects
//	chunkup abort  --server ADDR ID    abort an upload
//	chunkup watch  --server ADDR ID    print an upload's progress until it ends
//	chunkup events --brokers B         print events from Kafka as JSON lines
//	chunkup ocr …                      OCR documents: status, stats, dead letters, reprocessing
//	chunkup apikey TENANT              make an API key and its --api-keys entry
//	chunkup completion bash|zsh|fish   print a shell completion script
//	chunkup version                    print the version and commit (also --version)
//	chunkup help COMMAND               print a command's help (also chunkup COMMAND -h)
//
// main only turns flags into configurations and wires packages together (app does the
// assembly).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/client"
	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/server"
	core "github.com/chunkup/chunkup/upload"
)

// Exit codes scripts can rely on.
const (
	exitOK      = 0
	exitFailure = 1 // the operation failed (server error, upload failed)
	exitUsage   = 2 // bad command line
)

// runFunc runs a command with its arguments.
type runFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// command is one of chunkup's commands.
type command struct {
	name, summary string
	run           runFunc
}

// commands lists the commands in the order usage shows them. (A function, not a
// variable: completion, which is among them, reads the list.)
func commands() []command {
	return []command{
		{"serve", "run the service (all roles unless --roles narrows them)", func(ctx context.Context, args []string, _, stderr io.Writer) error {
			return serve(ctx, args, stderr)
		}},
		{"dev", "run everything in one process with embedded Redis, S3 and Kafka", dev},
		{"upload", "upload files (or trees, -r) and print the final uploads", upload},
		{"status", "print an upload's state", statusCmd},
		{"ls", "list your objects under a prefix (--uploads: your uploads in progress)", ls},
		{"get", "download an object (or a range, or with -r every object under a prefix), checked by CRC32C", get},
		{"stat", "print what is known of an object", statCmd},
		{"rm", "delete objects (-r: every object under a prefix)", rmCmd},
		{"abort", "abort an upload", abort},
		{"watch", "print an upload's progress until it ends", watch},
		{"events", "print chunkup's Kafka events as JSON lines", eventsCmd},
		{"apikey", "make an API key for a tenant and print its configuration entry", func(_ context.Context, args []string, stdout, stderr io.Writer) error {
			return apikey(args, stdout, stderr)
		}},
		{"ocr", "OCR documents: status, stats, dead list|requeue, reprocess", ocrCmd},
		{"completion", "print a shell completion script: completion bash|zsh|fish", completionCmd},
		{"version", "print chunkup's version and the commit it was built from (also --version)", versionCmd},
	}
}

func usage() string {
	var b strings.Builder
	b.WriteString("usage: chunkup COMMAND [flags]\n\ncommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'chunkup help COMMAND' (or 'chunkup COMMAND -h') for a command's flags.\n")
	return b.String()
}

func main() {
	// CHUNKUP_CPUPROFILE=FILE writes a CPU profile of the command (the bench's CLI rows
	// measure the client a user runs; this is how to see where its time goes).
	if path := os.Getenv("CHUNKUP_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err == nil {
			code := run(os.Args[1:], os.Stdout, os.Stderr)
			pprof.StopCPUProfile()
			f.Close()
			os.Exit(code)
		}
		fmt.Fprintf(os.Stderr, "chunkup: warning: CHUNKUP_CPUPROFILE: %v; running without a profile\n", err)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	ctx, stop := interruptible(context.Background())
	defer stop()
	var err error
	switch i := slices.IndexFunc(commands(), func(c command) bool { return c.name == args[0] }); {
	case i >= 0:
		err = commands()[i].run(ctx, args[1:], stdout, stderr)
	case args[0] == "--version" || args[0] == "-version":
		err = versionCmd(ctx, args[1:], stdout, stderr)
	case args[0] == "docs-flags": // hidden: `make docs` writes docs/configuration.md with it
		err = docsFlagsCmd(ctx, args[1:], stdout, stderr)
	case args[0] == "help" && len(args) > 1:
		err = helpCmd(ctx, args[1:], stdout)
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, usage())
		return exitOK
	default:
		fmt.Fprintf(stderr, "chunkup: unknown command %q\n\n%s", args[0], usage())
		return exitUsage
	}
	var ue usageError
	var sig interruption
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(context.Cause(ctx), &sig):
		// The command failed because it was interrupted: say that, not how the
		// interruption broke its calls, and exit as a shell does (128 + the signal).
		fmt.Fprintf(stderr, "chunkup: %s\n", interruptedLine(args[0]))
		return 128 + int(sig.sig)
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "chunkup: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "chunkup: %s\n", describe(err))
		return exitFailure
	}
}

// interruption is the cause of a command's context when a signal ended it.
type interruption struct{ sig syscall.Signal }

func (i interruption) Error() string {
	if i.sig == syscall.SIGINT {
		return "interrupted (SIGINT)"
	}
	return fmt.Sprintf("interrupted (%v)", i.sig)
}

// interruptible returns a context that is canceled with an interruption on the first
// SIGINT or SIGTERM (a second one is ignored: the command is winding down).
func interruptible(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			cancel(interruption{s.(syscall.Signal)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(nil)
	}
}

// interruptedLine is what a command interrupted by a signal says.
func interruptedLine(cmd string) string {
	switch cmd {
	case "upload":
		return "interrupted: run the same command again to resume"
	case "get":
		return "interrupted: the download did not finish (no FILE was written); run the same command again"
	}
	return "interrupted"
}

// helpCmd prints the help of command args[0] (for ocr, of its command args[1:]) on
// stdout, as `chunkup COMMAND -h` does on stderr.
func helpCmd(ctx context.Context, args []string, stdout io.Writer) error {
	i := slices.IndexFunc(commands(), func(c command) bool { return c.name == args[0] })
	switch {
	case args[0] == "help":
		fmt.Fprint(stdout, usage())
		return nil
	case i < 0:
		return usageError{fmt.Errorf("help: unknown command %q: 'chunkup help' lists the commands", args[0])}
	case len(args) > 1 && args[0] != "ocr":
		return usageError{fmt.Errorf("help takes one command: chunkup help %s", args[0])}
	}
	// The command sees only -h (after ocr's command words): it prints its help and
	// does nothing else.
	return commands()[i].run(ctx, append(slices.Clone(args[1:]), "-h"), stdout, stdout)
}

// versionCmd prints chunkup's version: the module version and the commit it was built
// from, as the Go toolchain recorded them in the binary.
func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version")
	fs.SetOutput(stderr)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{errors.New("version takes no arguments")}
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi, ok))
	return nil
}

// versionLine describes a build: "chunkup VERSION (commit REV, TIME, modified;
// go1.26.8 linux/amd64)". VERSION is "(devel)" when the module has no version (a
// build from a checkout); the commit is "no commit recorded" when the build recorded
// none (go run, -buildvcs=false).
func versionLine(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "chunkup (devel) (no build information)"
	}
	var rev, when string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var parts []string
	if rev != "" {
		parts = append(parts, "commit "+rev)
		if when != "" {
			parts = append(parts, when)
		}
		if modified {
			parts = append(parts, "modified")
		}
	}
	built := strings.TrimSpace(bi.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH)
	if len(parts) == 0 {
		parts = append(parts, "no commit recorded")
	}
	return fmt.Sprintf("chunkup %s (%s; %s)", cmp.Or(bi.Main.Version, "(devel)"), strings.Join(parts, ", "), built)
}

type usageError struct{ error }

// describe turns an error into one line that says what to do: a gRPC status as
// "CODE: message", an unreachable server as such.
func describe(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		s := se.GRPCStatus()
		if s.Code() == codes.Unavailable {
			return fmt.Sprintf("Unavailable: cannot reach the chunkup server (%s); check --server or $CHUNKUP_SERVER, or start one with `chunkup dev`", s.Message())
		}
		return fmt.Sprintf("%s: %s", s.Code(), s.Message())
	}
	var mismatch *client.MismatchError
	if errors.As(err, &mismatch) {
		return fmt.Sprintf("the input is not the one in upload %s (%s); nothing was mixed into it: upload it as a new upload (run the command again: an interrupted upload it remembered is forgotten now; without --resume ID)", mismatch.UploadID, mismatch.Reason)
	}
	// The SDK's errors say "chunkup:" already; the command's line says it once.
	return strings.TrimPrefix(err.Error(), "chunkup: ")
}

func newLogger(format, level string, w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("log level %q: use debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("log format %q: use text or json", format)}
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("serve", "serve [flags]")
	fs.SetOutput(stderr)
	var cfg app.Config
	grpcAddr := fs.String("grpc-addr", "CHUNKUP_GRPC_ADDR", "127.0.0.1:7070", "gRPC listen address")
	httpAddr := fs.String("http-addr", "CHUNKUP_HTTP_ADDR", "127.0.0.1:7071", "HTTP address for /healthz, /readyz, /metrics and HTTP uploads (off to disable)")
	door := doorFlags(fs)
	redisURL := fs.String("redis-url", "CHUNKUP_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL; a cluster: redis+cluster://host1:port1,host2:port2")
	minReplicas := fs.Int("redis-min-replicas", "CHUNKUP_REDIS_MIN_REPLICAS", 0, "Redis replicas that must confirm a chunk (WAIT) before it is acknowledged (0: do not wait)")
	replicaTimeout := fs.Duration("redis-replica-timeout", "CHUNKUP_REDIS_REPLICA_TIMEOUT", 0, "how long a chunk waits for those replicas before it is refused as UNAVAILABLE (default 1s)")
	s3Endpoint := fs.String("s3-endpoint", "CHUNKUP_S3_ENDPOINT", "", "S3-compatible endpoint URL (empty: AWS S3)")
	s3Region := fs.String("s3-region", "CHUNKUP_S3_REGION", "us-east-1", "S3 region")
	bucket := fs.String("s3-bucket", "CHUNKUP_S3_BUCKET", "chunkup", "bucket for the objects (created if missing)")
	kafkaBrokers := fs.String("kafka-brokers", "CHUNKUP_KAFKA_BROKERS", "", "Kafka bootstrap brokers, comma-separated (empty: events wait in Redis)")
	kafkaTopic := fs.String("kafka-topic", "CHUNKUP_KAFKA_TOPIC", "chunkup.uploads", "topic for upload events")
	roles := fs.String("roles", "CHUNKUP_ROLES", strings.Join(app.AllRoles, ","), "roles to run, comma-separated")
	instanceID := fs.String("instance-id", "CHUNKUP_INSTANCE_ID", "", "name of this process in state, events and logs (default hostname-pid)")
	legacyNodeID := fs.String("node-id", "CHUNKUP_NODE_ID", "", "deprecated name of --instance-id (node ids name documents now)")
	keyTemplate := fs.String("key-template", "CHUNKUP_KEY_TEMPLATE", "", "object keys of uploads that bring none, e.g. connectors/{connector_id}/{node_id}.pb; variables {upload_id} {node_id} {connector_id} {name} {ext} {tenant} (empty: uploads/{upload_id}/{name})")
	adminTenants := fs.String("admin-tenants", "CHUNKUP_ADMIN_TENANTS", "", "tenants allowed the OCR queue's administration (stats, dead letters, purge), comma-separated; without authentication everyone is")
	chunkSize := fs.Size("chunk-size", "CHUNKUP_CHUNK_SIZE", 8<<20, "default chunk size (at least 5MiB)")
	maxChunk := fs.Size("max-chunk-size", "CHUNKUP_MAX_CHUNK_SIZE", 64<<20, "largest chunk size chosen for big uploads")
	chunkTTL := fs.Duration("chunk-ttl", "CHUNKUP_CHUNK_TTL", 0, "how long staged chunk bytes live in Redis (default 1h)")
	maxActive := fs.Int("max-active-uploads-per-tenant", "CHUNKUP_MAX_ACTIVE_UPLOADS_PER_TENANT", core.DefaultMaxActivePerTenant, "uploads one tenant may have in progress across every process and door; past it a create gets RESOURCE_EXHAUSTED / 429 with a retry delay (negative: no bound)")
	createRate := fs.String("create-rate-per-tenant", "CHUNKUP_CREATE_RATE_PER_TENANT", strconv.Itoa(core.DefaultCreateRatePerTenant), "uploads one tenant may create per second on each process (bursts of twice that); past it RESOURCE_EXHAUSTED / 429 with a retry delay (negative: no bound)")
	stateTTL := fs.Duration("state-ttl", "CHUNKUP_STATE_TTL", 0, "how long an upload may be idle before it expires (default 24h)")
	retention := fs.Duration("retention", "CHUNKUP_RETENTION", 0, "how long an ended upload's state stays readable (default 24h)")
	cleanupEvery := fs.Duration("cleanup-interval", "CHUNKUP_CLEANUP_INTERVAL", 0, "how often idle uploads are looked for (default 10s)")
	reconcileEvery := fs.Duration("reconcile-interval", "CHUNKUP_RECONCILE_INTERVAL", 0, "how often every active upload is checked for work a Redis failover or restart took out of the indexes (default 30s)")
	workers := fs.Int("worker-concurrency", "CHUNKUP_WORKER_CONCURRENCY", 8, "chunks uploaded to S3 at once")
	lease := fs.Duration("lease", "CHUNKUP_LEASE", 0, "chunk claim lease; a dead worker's chunks wait this long (default 30s)")
	sweep := fs.Duration("sweep-interval", "CHUNKUP_SWEEP_INTERVAL", 0, "how often lost wake-ups, expired leases and due retries are swept while there is work; an index with nothing due is swept when its next entry falls due, up to ten times less often (the completions index so only in a process that runs the api and worker roles too) (default 1s)")
	complLease := fs.Duration("completer-lease", "CHUNKUP_COMPLETER_LEASE", 0, "completion guard lease (default 60s)")
	s3Conditional := fs.Bool("s3-conditional-writes", "CHUNKUP_S3_CONDITIONAL_WRITES", true, "write the objects of uploads made with if_absent with If-None-Match: * (false: look at the key just before writing, for stores that ignore the header)")
	s3Checksums := fs.Bool("s3-checksums", "CHUNKUP_S3_CHECKSUMS", true, "send chunks with UNSIGNED-PAYLOAD and their CRC32C, and complete multipart uploads with the object's CRC32C (false: SigV4-signed payloads, no checksums, for stores that refuse them)")
	s3Attempts := fs.Int("s3-max-attempts", "CHUNKUP_S3_MAX_ATTEMPTS", 3, "attempts per S3 call on transient errors")
	s3Timeout := fs.Duration("s3-timeout", "CHUNKUP_S3_TIMEOUT", 0, "bound on one chunk's S3 calls, retries included; a hung call is abandoned and retried (default 2m)")
	s3GiveUp := fs.Duration("s3-give-up-after", "CHUNKUP_S3_GIVE_UP_AFTER", 0, "fail an upload whose chunk S3 keeps refusing this long (0: retry until the chunk's bytes expire)")
	shutdown := fs.Duration("shutdown-timeout", "CHUNKUP_SHUTDOWN_TIMEOUT", 0, "graceful shutdown limit (default 20s)")
	logFormat := fs.String("log-format", "CHUNKUP_LOG_FORMAT", "text", "log format: text or json")
	logLevel := fs.String("log-level", "CHUNKUP_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	pprofOn := fs.Bool("pprof", "CHUNKUP_PPROF", false, "serve Go profiles under /debug/pprof/ on --http-addr (keep that address private)")
	apiKeys := fs.String("api-keys", "CHUNKUP_API_KEYS", "", "accepted API keys as TENANT:SHA256HEX, comma-separated (chunkup apikey makes one)")
	jwtSecret := fs.String("jwt-secret", "CHUNKUP_JWT_SECRET", "", "verify HS256 bearer tokens with this secret (at least 32 bytes)")
	jwtKey := fs.String("jwt-public-key", "CHUNKUP_JWT_PUBLIC_KEY", "", "verify RS256 bearer tokens with this PEM public key file")
	jwtIssuer := fs.String("jwt-issuer", "CHUNKUP_JWT_ISSUER", "", "required token issuer (iss)")
	jwtAudience := fs.String("jwt-audience", "CHUNKUP_JWT_AUDIENCE", "", "required token audience (aud)")
	jwtClaim := fs.String("jwt-tenant-claim", "CHUNKUP_JWT_TENANT_CLAIM", "tenant", "token claim that names the tenant")
	tlsCert := fs.String("tls-cert", "CHUNKUP_TLS_CERT", "", "serve gRPC over TLS with this certificate (PEM)")
	tlsKey := fs.String("tls-key", "CHUNKUP_TLS_KEY", "", "the certificate's key (PEM)")
	tlsClientCA := fs.String("tls-client-ca", "CHUNKUP_TLS_CLIENT_CA", "", "require client certificates from this CA (mutual TLS)")
	httpTLSCert := fs.String("http-tls-cert", "CHUNKUP_HTTP_TLS_CERT", "", "serve --http-addr over TLS (HTTPS, HTTP/1.1) with this certificate (PEM): HTTP uploads, the page, /healthz, /readyz, /metrics")
	httpTLSKey := fs.String("http-tls-key", "CHUNKUP_HTTP_TLS_KEY", "", "the HTTPS certificate's key (PEM)")
	httpTLSClientCA := fs.String("http-tls-client-ca", "CHUNKUP_HTTP_TLS_CLIENT_CA", "", "require HTTPS client certificates from this CA (mutual TLS)")
	maxUpload := fs.Size("max-upload-size", "CHUNKUP_MAX_UPLOAD_SIZE", 0, "largest upload accepted (0: 10,000 chunks of --max-chunk-size)")
	maxStreams := fs.Int("max-streams-per-tenant", "CHUNKUP_MAX_STREAMS_PER_TENANT", core.DefaultMaxStreamsPerTenant, "upload streams one tenant may have open on this process (negative: no limit)")
	maxReads := fs.Int("max-reads-per-tenant", "CHUNKUP_MAX_READS_PER_TENANT", server.DefaultMaxReadsPerTenant, "ReadObject streams one tenant may have open on this process (-1: no limit)")
	maxWatches := fs.Int("max-watches-per-tenant", "CHUNKUP_MAX_WATCHES_PER_TENANT", 1000, "WatchUpload and WatchDocument streams one tenant may have open on this process (-1: no limit)")
	maxReceive := fs.Size("max-receive-memory", "CHUNKUP_MAX_RECEIVE_MEMORY", server.DefaultMaxReceiveMemory, "cap on the bytes held in chunk messages being received or processed; a stream waiting for a message counts the largest one (--max-chunk-size + 64KiB); messages being decoded may hold a sixteenth more; also sets the soft memory limit (GOMEMLIMIT overrides it; docs/limits.md)")
	maxReceiveTenant := fs.Size("max-receive-memory-per-tenant", "CHUNKUP_MAX_RECEIVE_MEMORY_PER_TENANT", 0, "what one tenant's streams may hold of --max-receive-memory, so that its streams waiting for messages cannot lock other tenants out (0: all but one largest message; the same as --max-receive-memory: no cap of its own)")
	idleTimeout := fs.Duration("stream-idle-timeout", "CHUNKUP_STREAM_IDLE_TIMEOUT", server.DefaultStreamIdleTimeout, "close an upload stream that sent no chunk for this long (DEADLINE_EXCEEDED; the upload stays resumable; negative: never)")
	stagingMode := fs.String("staging", "CHUNKUP_STAGING", core.StagingAdaptive, "adaptive: write a chunk straight through to S3 when this process's worker has a free slot and S3 keeps pace, else stage it in Redis; always: stage every chunk in Redis")
	slowPart := fs.Duration("slow-part", "CHUNKUP_SLOW_PART", time.Second, "an 8MiB part upload slower than this (on average; larger parts proportionally) means S3 is behind: chunks are staged in Redis instead of written through")
	budget := fs.Size("staged-bytes-budget", "CHUNKUP_STAGED_BYTES_BUDGET", 0, "Redis memory (used_memory) above which streams stop reading chunks until workers drain it (0: half of Redis' maxmemory, none when Redis has no maxmemory)")
	ratePerTenant := fs.String("rate-limit", "CHUNKUP_RATE_LIMIT", "0", "calls per second per tenant (0: no limit)")
	rateBurst := fs.Int("rate-burst", "CHUNKUP_RATE_BURST", 0, "burst of calls per tenant (0: twice the rate)")
	applyOCR := ocrFlags(fs)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("serve takes no arguments, got %q", fs.Args())}
	}
	authCfg, err := authConfig(*apiKeys, *jwtSecret, *jwtKey, *jwtIssuer, *jwtAudience, *jwtClaim)
	if err != nil {
		return usageError{err}
	}
	rate, err := strconv.ParseFloat(*ratePerTenant, 64)
	if err != nil || rate < 0 {
		return usageError{fmt.Errorf("--rate-limit %q: want a number of calls per second", *ratePerTenant)}
	}
	creates, err := strconv.ParseFloat(*createRate, 64)
	if err != nil {
		return usageError{fmt.Errorf("--create-rate-per-tenant %q: want a number of uploads per second", *createRate)}
	}
	logger, err := newLogger(*logFormat, *logLevel, stderr)
	if err != nil {
		return err
	}
	cfg = app.Config{
		Auth: authCfg, TLS: server.TLSConfig{CertFile: *tlsCert, KeyFile: *tlsKey, ClientCAFile: *tlsClientCA},
		HTTPTLS:       server.TLSConfig{CertFile: *httpTLSCert, KeyFile: *httpTLSKey, ClientCAFile: *httpTLSClientCA},
		RatePerTenant: rate, RateBurst: *rateBurst,
		GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr, RedisURL: *redisURL, Bucket: *bucket,
		S3: s3store.Config{Endpoint: *s3Endpoint, Region: *s3Region, MaxAttempts: *s3Attempts, NoChecksums: !*s3Checksums,
			NoConditionalWrites: !*s3Conditional},
		InstanceID: cmp.Or(*instanceID, *legacyNodeID), ShutdownTimeout: *shutdown, Logger: logger, Pprof: *pprofOn,
	}
	for t := range strings.SplitSeq(*adminTenants, ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.Documents.AdminTenants = append(cfg.Documents.AdminTenants, t)
		}
	}
	cfg.Upload.KeyTemplate = *keyTemplate
	for r := range strings.SplitSeq(*roles, ",") {
		if r = strings.TrimSpace(r); r != "" {
			cfg.Roles = append(cfg.Roles, r)
		}
	}
	cfg.Staging.ChunkTTL, cfg.Staging.StateTTL, cfg.Staging.Retention = *chunkTTL, *stateTTL, *retention
	cfg.Staging.MinReplicas, cfg.Staging.ReplicaTimeout = *minReplicas, *replicaTimeout
	cfg.Staging.MaxActivePerTenant, cfg.Upload.CreateRatePerTenant = *maxActive, creates
	cfg.Expirer.Interval, cfg.Expirer.ReconcileInterval, cfg.KafkaTopic = *cleanupEvery, *reconcileEvery, *kafkaTopic
	for b := range strings.SplitSeq(*kafkaBrokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.KafkaBrokers = append(cfg.KafkaBrokers, b)
		}
	}
	cfg.Upload.ChunkSize, cfg.Upload.MaxChunkSize = *chunkSize, *maxChunk
	cfg.Server.MaxChunkSize = *maxChunk
	cfg.Upload.MaxUploadSize, cfg.Upload.MaxStreamsPerTenant, cfg.Upload.StagedBytesBudget = *maxUpload, *maxStreams, *budget
	cfg.Server.MaxWatchesPerTenant, cfg.Server.MaxReadsPerTenant = *maxWatches, *maxReads
	if *maxStreams < 0 {
		cfg.Upload.MaxStreamsPerTenant = -1
	}
	cfg.Server.MaxReceiveMemory, cfg.Server.StreamIdleTimeout, cfg.Upload.Staging = *maxReceive, *idleTimeout, *stagingMode
	cfg.Server.MaxReceiveMemoryPerTenant = *maxReceiveTenant
	cfg.Worker.SlowPart = *slowPart
	cfg.Worker.Concurrency, cfg.Worker.Lease, cfg.Worker.SweepInterval = *workers, *lease, *sweep
	cfg.Worker.S3Timeout = *s3Timeout
	cfg.Worker.GiveUpAfter = *s3GiveUp
	cfg.Completer.Lease, cfg.Completer.SweepInterval = *complLease, *sweep
	if err := applyOCR(&cfg); err != nil {
		return usageError{err}
	}
	if err := door(&cfg); err != nil {
		return err
	}
	if err := checkDirectAbove("serve", cfg.Upload.DirectAbove); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{fmt.Errorf("serve: settings refused: %w (see 'chunkup serve -h')", err)}
	}
	if os.Getenv("GOGC") == "" {
		// Chunk bytes are large pointer-free buffers that die young: collecting them
		// more often costs little CPU and keeps the resident set about a third lower
		// (docs/performance.md). GOGC overrides it.
		debug.SetGCPercent(serveGOGC)
		gcFloor = make([]byte, serveGCFloor)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// A soft memory limit from --max-receive-memory (server.MemoryLimit,
		// docs/limits.md): freed chunk buffers wait in pools for a collection, and
		// without a limit the collector lets the heap grow past what is live by GOGC
		// percent; near the limit it collects sooner. GOMEMLIMIT overrides it (off: none).
		limit := server.MemoryLimit(cfg.Server)
		if !cfg.HTTPDoor.Off {
			// The HTTP door's chunk buffers have a cap of their own (--http-receive-memory).
			limit += max(cmp.Or(cfg.HTTPDoor.Door.BufferBudget, 512<<20), 0)
		}
		debug.SetMemoryLimit(limit)
	}
	a, err := app.New(ctx, cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// serveGOGC is the garbage collector's target percentage for `chunkup serve` when GOGC
// is not set.
const serveGOGC = 40

// serveGCFloor is the size of gcFloor.
const serveGCFloor = 24 << 20

// gcFloor is never read or written: it only counts as live heap. With a heap of a few
// MiB and GOGC 40 the collector ran after every 2 MiB or so allocated, and for a direct
// upload, whose bytes never reach the server, collections were a fifth of the server's
// CPU (docs/performance.md, Run M). It moves each collection 40 % of its size later;
// never written, its pages are never resident.
var gcFloor []byte

func usageErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return usageError{err}
}

// clientFlags are the flags every client command takes.
func clientFlags(fs *flagSet) (server *string, asJSON *bool) {
	fs.notes = append(fs.notes, connectHelp)
	server = fs.String("server", "CHUNKUP_SERVER", "127.0.0.1:7070", "chunkup server address, HOST[:PORT] (port 7070 when left out)")
	asJSON = fs.Bool("json", "", false, "print the result as one JSON object")
	fs.creds = &credFlags{
		apiKey: fs.String("api-key", "CHUNKUP_API_KEY", "", "API key for the server"),
		token:  fs.String("token", "CHUNKUP_TOKEN", "", "bearer token (JWT) for the server"),
		tlsCA:  fs.String("tls-ca", "CHUNKUP_TLS_CA", "", "connect with TLS, trusting this CA file (PEM)"),
		cert:   fs.String("tls-cert", "CHUNKUP_TLS_CLIENT_CERT", "", "client certificate for mutual TLS (PEM)"),
		key:    fs.String("tls-key", "CHUNKUP_TLS_CLIENT_KEY", "", "client key for mutual TLS (PEM)"),
	}
	return server, asJSON
}

// checkDirectAbove refuses a --direct-above of cmd that S3 cannot take (the core's
// rule) as a usage error naming the flag, before anything starts.
func checkDirectAbove(cmd string, d int64) error {
	if err := core.CheckDirectAbove(d); err != nil {
		return usageError{fmt.Errorf("%s: --direct-above %s: %v", cmd, sizeString(d), err)}
	}
	return nil
}

func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return withUploadID(ctx, "status", args, stdout, stderr, func(ctx context.Context, c *client.Client, id string) (*chunkupv1.Upload, error) {
		r, err := c.API().GetUpload(ctx, &chunkupv1.GetUploadRequest{UploadId: id})
		return r.GetUpload(), err
	})
}

func abort(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return withUploadID(ctx, "abort", args, stdout, stderr, func(ctx context.Context, c *client.Client, id string) (*chunkupv1.Upload, error) {
		r, err := c.API().AbortUpload(ctx, &chunkupv1.AbortUploadRequest{UploadId: id, Reason: "aborted from the command line"})
		return r.GetUpload(), err
	})
}

func withUploadID(ctx context.Context, name string, args []string, stdout, stderr io.Writer,
	call func(context.Context, *client.Client, string) (*chunkupv1.Upload, error)) error {
	fs := newFlagSet(name, name+" [flags] UPLOAD_ID")
	fs.SetOutput(stderr)
	server, asJSON := clientFlags(fs)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() != 1 {
		return usageError{fmt.Errorf("%s needs exactly one UPLOAD_ID", name)}
	}
	c, err := fs.dial(ctx, *server)
	if err != nil {
		return err
	}
	defer c.Close()
	up, err := call(ctx, c.Client, fs.Arg(0))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return printUpload(stdout, up, *asJSON)
}

func printUpload(w io.Writer, up *chunkupv1.Upload, asJSON bool) error {
	if asJSON {
		return printProto(w, up)
	}
	_, err := fmt.Fprintln(w, uploadLine(up))
	return err
}

// uploadLine describes an upload in one line: a completed one by its object, one that
// is not by how far it came (and why it ended, if it did).
func uploadLine(up *chunkupv1.Upload) string {
	where := fmt.Sprintf("%s %s s3://%s/%s", up.UploadId, stateName(up.State), up.Bucket, up.Key)
	if up.State == chunkupv1.UploadState_UPLOAD_STATE_COMPLETED {
		return fmt.Sprintf("%s size=%d etag=%s", where, up.Size, up.Etag)
	}
	total, of := "?", ""
	if up.TotalChunks > 0 {
		total = fmt.Sprint(up.TotalChunks)
	}
	if up.ExpectedSize >= 0 {
		of = fmt.Sprintf(" of %d", up.ExpectedSize)
	}
	line := fmt.Sprintf("%s received %d/%s chunks (%d%s bytes), stored %d (%d bytes)",
		where, len(up.ReceivedChunks), total, up.ReceivedBytes, of, up.UploadedChunks, up.UploadedBytes)
	if up.Direct {
		// Its parts go from the client to S3: the server counts none before completing.
		var what []string
		if up.TotalChunks > 0 {
			what = append(what, fmt.Sprintf("%d parts", up.TotalChunks))
		}
		if up.ExpectedSize >= 0 {
			what = append(what, fmt.Sprintf("%d bytes in all", up.ExpectedSize))
		}
		line = where + " direct to S3"
		if len(what) > 0 {
			line += " (" + strings.Join(what, ", ") + ")"
		}
		switch up.State {
		case chunkupv1.UploadState_UPLOAD_STATE_ACTIVE:
			line += ": the client puts its parts into S3, and the server checks them when it completes"
		case chunkupv1.UploadState_UPLOAD_STATE_COMPLETING:
			line += ": the server checked its parts and is completing the object"
		} // ended: its parts were discarded, and its error says why
	}
	if up.Error != "" {
		line += ": " + up.Error
	}
	return line
}
