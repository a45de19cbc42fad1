package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/chunkup/chunkup/app"
	"github.com/chunkup/chunkup/internal/devenv"
	"github.com/chunkup/chunkup/ocr"
	"github.com/chunkup/chunkup/s3store"
	core "github.com/chunkup/chunkup/upload"
)

// dev runs the whole system in this process with embedded dependencies.
func dev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev", "dev [flags]")
	fs.SetOutput(stderr)
	data := fs.String("data", "CHUNKUP_DEV_DATA", ".chunkup-dev", "directory for Redis' AOF, the S3 objects and Kafka's log (one dev at a time: it is locked)")
	grpcAddr := fs.String("grpc-addr", "CHUNKUP_GRPC_ADDR", "127.0.0.1:7070", "gRPC listen address")
	httpAddr := fs.String("http-addr", "CHUNKUP_HTTP_ADDR", "127.0.0.1:7071", "HTTP address for the upload page, HTTP uploads (/files/), /healthz, /readyz and /metrics (off to disable)")
	s3Addr := fs.String("s3-addr", "CHUNKUP_DEV_S3_ADDR", "127.0.0.1:7072", "embedded S3 listen address")
	kafkaAddr := fs.String("kafka-addr", "CHUNKUP_DEV_KAFKA_ADDR", "127.0.0.1:7073", "embedded Kafka listen address")
	redisAddr := fs.String("redis-addr", "CHUNKUP_DEV_REDIS_ADDR", "127.0.0.1:0", "Redis listen address (port 0: any free port)")
	redisMode := fs.String("redis", "CHUNKUP_DEV_REDIS", devenv.RedisAuto, "redis-server from PATH (spawn), in-process (embedded), or spawn when possible (auto)")
	bucket := fs.String("s3-bucket", "CHUNKUP_S3_BUCKET", "chunkup", "bucket for the objects")
	topic := fs.String("kafka-topic", "CHUNKUP_KAFKA_TOPIC", "chunkup.uploads", "topic for upload events")
	withParent := fs.Bool("exit-with-parent", "CHUNKUP_DEV_EXIT_WITH_PARENT", true, "stop when the process that started dev exits (such as go run), so nothing is left running; false to outlive it")
	logFormat := fs.String("log-format", "CHUNKUP_LOG_FORMAT", "text", "log format: text or json")
	logLevel := fs.String("log-level", "CHUNKUP_LOG_LEVEL", "info", "log level: debug, info, warn, error")
	ocrMode := fs.String("ocr", "CHUNKUP_OCR", "auto", "OCR of uploaded images and PDFs: auto (on when tesseract is on PATH or --ocr-engine-url is set), true or false")
	serviceKey := fs.String("service-internal-key", "CHUNKUP_SERVICE_INTERNAL_KEY", "chunkup-dev", "x-service-key of the verification webhook")
	directAbove := fs.Size("direct-above", "CHUNKUP_DIRECT_ABOVE", 0, "offer a direct upload to the embedded S3 to clients that take one (chunkup upload does unless --through-server) for files of at least this size, as serve --direct-above does; at least 5MiB, 0: never")
	applyEngine := ocrEngineFlags(fs)
	if err := fs.parse(args); err != nil {
		return usageErr(err)
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("dev takes no arguments, got %q", fs.Args())}
	}
	cfg := app.Config{GRPCAddr: *grpcAddr, HTTPAddr: *httpAddr, Bucket: *bucket, KafkaTopic: *topic, InstanceID: "dev",
		HTTPDoor: app.HTTPDoorConfig{Page: true}}
	cfg.OCR.ServiceKey = *serviceKey
	if err := checkDirectAbove("dev", *directAbove); err != nil {
		return err
	}
	cfg.Upload.DirectAbove = *directAbove
	cfg.Staging.MaxActivePerTenant = core.DefaultMaxActivePerTenant
	applyEngine(&cfg.OCR)
	ocrLine, err := devOCR(*ocrMode, &cfg.OCR)
	if err != nil {
		return err
	}
	// Every role runs, named so that the log says which (ocr only when OCR is on).
	for _, r := range app.AllRoles {
		if r != app.RoleOCR || cfg.OCR.Enabled {
			cfg.Roles = append(cfg.Roles, r)
		}
	}
	logger, err := newLogger(*logFormat, *logLevel, stderr)
	if err != nil {
		return err
	}
	// A closed terminal stops dev as Ctrl-C does, so redis-server is stopped cleanly.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	if *withParent {
		if err := exitWithParent(); err != nil {
			return fmt.Errorf("dev: watch the parent process: %w", err)
		}
	}

	// The data directory is locked before anything starts, so a second dev on it stops
	// here and never spawns a second redis-server on the same files.
	env, err := devenv.Prepare(devenv.Config{DataDir: *data, Redis: *redisMode, RedisAddr: *redisAddr,
		S3Addr: *s3Addr, KafkaAddr: *kafkaAddr, Topic: *topic, Logger: logger})
	var locked *devenv.LockedError
	if errors.As(err, &locked) {
		return fmt.Errorf("%w: stop it, or give this one another directory with --data", err)
	}
	if err != nil {
		return err
	}
	defer env.Close()
	if err := checkFree([][2]string{{"grpc-addr", *grpcAddr}, {"http-addr", *httpAddr},
		{"s3-addr", *s3Addr}, {"kafka-addr", *kafkaAddr}, {"redis-addr", *redisAddr}}); err != nil {
		return err
	}
	if err := env.Start(ctx); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	cfg.RedisURL, cfg.KafkaBrokers, cfg.Logger = env.RedisURL, []string{env.KafkaAddr}, logger
	// The embedded store (gofakes3) checks no checksum: with checksums on, a direct
	// upload's parts would be taken on the client's word (the CRC32Cs bound into their
	// URLs, which S3 checks and this store does not). Off, a direct upload's object is
	// read back for its CRC32C, and chunks go signed.
	cfg.S3 = s3store.Config{Endpoint: env.S3Endpoint, AccessKey: "chunkup-dev", SecretKey: "chunkup-dev", NoChecksums: true}
	a, err := app.New(ctx, cfg)
	if err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	cli, install := cliCommand(os.Args[0])
	tryOCR := ""
	if cfg.OCR.Enabled {
		tryOCR = fmt.Sprintf("\n       %s ocr watch --server %s ID   (then: %s ocr status --text ID)", cli, a.GRPCAddr(), cli)
	}
	tryOCR += install
	fmt.Fprintf(stdout, `chunkup dev: every role in one process, for development only (no authentication)
  gRPC   %s
  HTTP   http://%s  (upload page; tus and IETF uploads at /files/, direct to S3 at /s3/; /healthz, /readyz, /metrics, %s)
  S3     %s  (bucket %s, objects under %s)
  Kafka  %s  (topic %s)
  Redis  %s  (%s)
  OCR    %s
  Data   %s  (locked by this process, pid %d)
Try:   %s upload --server %s FILE
       %s events --brokers %s%s
`, a.GRPCAddr(), a.HTTPAddr(), ocr.WebhookPath, env.S3Endpoint, *bucket, env.S3Dir, env.KafkaAddr, *topic,
		env.RedisURL, env.RedisKind, ocrLine, *data, os.Getpid(), cli, a.GRPCAddr(), cli, env.KafkaAddr, tryOCR)
	if f, ok := stdout.(interface{ Sync() error }); ok {
		_ = f.Sync()
	}
	return a.Run(ctx)
}

// cliCommand is how the banner's Try: lines run the CLI, given the name dev was started
// by (os.Args[0]): as it was typed (chunkup found on PATH, bin/chunkup), or under go run
// (a binary in a go-build directory) go run ./cmd/chunkup, with a line saying how to
// install it.
func cliCommand(arg0 string) (cli, install string) {
	if strings.Contains(filepath.ToSlash(arg0), "/go-build") {
		return "go run ./cmd/chunkup", "\n       (go install ./cmd/chunkup puts chunkup on your PATH)"
	}
	return arg0, ""
}

// devOCR turns OCR on in o as mode says (auto: when an engine is there) and returns
// the banner's line: whether OCR is on, with what, and if not, why and how to turn it on.
func devOCR(mode string, o *app.OCRConfig) (string, error) {
	var on bool
	switch mode {
	case "auto":
	case "true", "on", "1":
		on = true
	case "false", "off", "0":
		return "off (--ocr=false): uploads are stored, not read; --ocr=auto turns it on when tesseract is installed", nil
	default:
		return "", usageError{fmt.Errorf("--ocr %q: use auto, true or false", mode)}
	}
	tess, tessErr := exec.LookPath(o.Tesseract.Path)
	pdf := ", PDFs with pdftoppm"
	if _, err := exec.LookPath(o.Tesseract.PdftoppmPath); err != nil {
		pdf = ", images only: pdftoppm is not on PATH for PDFs (install poppler-utils)"
	}
	webhook := "; webhook key " + strconv.Quote(o.ServiceKey)
	switch {
	case o.Remote.URL != "":
		o.Enabled = true
		fb := "falls back to tesseract at " + tess
		switch {
		case o.NoFallback:
			fb = "no fallback"
		case tessErr != nil:
			fb = "no fallback: tesseract is not on PATH"
		}
		return fmt.Sprintf("on: remote engine %s (%s)%s", o.Remote.URL, fb, webhook), nil
	case tessErr == nil:
		o.Enabled = true
		return fmt.Sprintf("on: tesseract at %s (%s)%s%s", tess, o.Tesseract.Lang, pdf, webhook), nil
	case on:
		o.Enabled = true
		return fmt.Sprintf("on, but tesseract is not on PATH (%v): jobs wait until it is installed (apt-get install tesseract-ocr tesseract-ocr-eng poppler-utils, or brew install tesseract poppler)", tessErr), nil
	}
	return "off: tesseract is not on PATH; install it (apt-get install tesseract-ocr tesseract-ocr-eng poppler-utils, or brew install tesseract poppler) and restart dev, or give --ocr-engine-url", nil
}

// checkFree fails when one of the listen addresses (flag name, address) is taken, naming
// its flag, before dev starts anything; port 0 and "off" are never taken.
func checkFree(addrs [][2]string) error {
	for _, a := range addrs {
		name, addr := a[0], a[1]
		if _, port, err := net.SplitHostPort(addr); addr == "off" || (err == nil && port == "0") {
			continue
		}
		l, err := net.Listen("tcp", addr)
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("--%s %s is in use (another chunkup dev or serve?): stop what listens there, or choose another address with --%s", name, addr, name)
		}
		if err != nil {
			return usageError{fmt.Errorf("--%s %s: %w", name, addr, err)}
		}
		l.Close()
	}
	return nil
}
