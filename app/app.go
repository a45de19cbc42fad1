// Package app assembles a chunkup process from its configuration: it connects to Redis
// and S3, opens the stores, builds the roles asked for (api, worker, completer,
// publisher, cleanup, ocr) from their packages, wires the in-process wake-ups between
// them (internal/notify), and runs them until the context ends, then shuts down
// gracefully. cmd/chunkup only turns flags into a Config; tests start the same App in
// process.
package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/chunkup/chunkup/chunkworker"
	"github.com/chunkup/chunkup/cleanup"
	"github.com/chunkup/chunkup/completion"
	"github.com/chunkup/chunkup/events"
	"github.com/chunkup/chunkup/httpdoor"
	"github.com/chunkup/chunkup/internal/metrics"
	"github.com/chunkup/chunkup/internal/notify"
	"github.com/chunkup/chunkup/internal/tracing"
	"github.com/chunkup/chunkup/s3store"
	"github.com/chunkup/chunkup/server"
	"github.com/chunkup/chunkup/staging"
	"github.com/chunkup/chunkup/staging/documents"
	"github.com/chunkup/chunkup/staging/ocrqueue"
	"github.com/chunkup/chunkup/staging/outbox"
	"github.com/chunkup/chunkup/staging/uploads"
	"github.com/chunkup/chunkup/upload"
)

// The roles a process can run.
const (
	RoleAPI       = "api"
	RoleWorker    = "worker"
	RoleCompleter = "completer"
	RolePublisher = "publisher"
	RoleCleanup   = "cleanup"
)

// AllRoles is the default: every role in one process.
var AllRoles = []string{RoleAPI, RoleWorker, RoleCompleter, RolePublisher, RoleCleanup, RoleOCR}

// Config configures a process. Zero values mean the documented defaults.
type Config struct {
	// GRPCAddr is where the API listens. Zero means 127.0.0.1:7070; port 0 picks one.
	GRPCAddr string
	// HTTPAddr serves /healthz and /readyz. Zero means 127.0.0.1:7071; "off" disables it.
	HTTPAddr string
	// RedisURL locates Redis. Zero means redis://127.0.0.1:6379/0.
	RedisURL string
	// S3 locates S3; Bucket is created if missing. Zero Bucket means "chunkup".
	S3     s3store.Config
	Bucket string
	// KafkaBrokers receive events on KafkaTopic (zero: "chunkup.uploads"). Without
	// brokers the publisher role is off and events wait in Redis outboxes.
	KafkaBrokers []string
	KafkaTopic   string
	// Roles to run. Zero means AllRoles.
	Roles []string
	// InstanceID names the process in state, events and logs (instance_id). Zero means
	// hostname-pid. (Documents have node ids; processes have instance ids.)
	InstanceID string
	// ShutdownTimeout bounds graceful shutdown. Zero means 20 s.
	ShutdownTimeout time.Duration
	// Pprof serves Go's profiles under /debug/pprof/ on HTTPAddr. Off by default: the
	// profiles reveal internals, so turn it on only where HTTPAddr is private.
	Pprof bool

	// Auth says who may call the API. Its zero value lets everyone in (development
	// only; the process warns loudly).
	Auth server.AuthConfig
	// TLS secures gRPC (and with a client CA, requires client certificates).
	TLS server.TLSConfig
	// HTTPTLS serves HTTPAddr over TLS (HTTP/1.1): the HTTP uploads, the upload page,
	// /healthz, /readyz and /metrics alike. With a client CA it requires client
	// certificates. Zero: plain HTTP.
	HTTPTLS server.TLSConfig
	// HTTPServer bounds the HTTP address's connections, headers and idle time.
	HTTPServer HTTPServerConfig
	// RatePerTenant limits each tenant's calls per second (zero: no limit), with bursts
	// of RateBurst (zero: twice the rate).
	RatePerTenant float64
	RateBurst     int
	// Documents configures the document service (admin tenants).
	Documents server.DocumentConfig

	// The roles' configurations. Where a field the App knows (a bucket, a node id, a
	// logger, metrics) is left zero, the App fills it; a field set is kept.
	Staging staging.Config
	// Upload configures the upload core (package upload): chunk sizes, object keys,
	// the limits on uploads and staging every door shares. Its Bucket, InstanceID and
	// Logger are the App's when left zero.
	Upload    upload.Config
	Server    server.Config
	Worker    chunkworker.Config
	Completer completion.Config
	Publisher events.PublisherConfig
	Expirer   cleanup.ExpirerConfig
	// Handoff receives completed uploads for further processing (OCR). Optional; set to
	// the OCR queue when OCR.Enabled and unset.
	Handoff completion.Handoff
	// OCR configures the OCR pipeline (see ocr.go).
	OCR    OCRConfig
	Logger *slog.Logger
	// Observe configures metrics and tracing (see observe.go).
	Observe ObserveConfig
	// HTTPDoor configures the HTTP door (tus and the IETF resumable-upload draft) that
	// the api role serves on HTTPAddr (see httpdoor.go).
	HTTPDoor HTTPDoorConfig
	// DirectDoor configures the direct-to-S3 door (Uppy Companion's S3 multipart
	// contract) that the api role serves on HTTPAddr (see directdoor.go).
	DirectDoor DirectDoorConfig
}

// Validate checks the configuration and the configurations of every role.
func (c *Config) Validate() error {
	for _, r := range c.Roles {
		if !slices.Contains(AllRoles, r) {
			return fmt.Errorf("unknown role %q (roles: %s)", r, strings.Join(AllRoles, ", "))
		}
	}
	if c.ShutdownTimeout < 0 {
		return errors.New("shutdown timeout must not be negative")
	}
	if rdb, _, err := NewRedisClient(c.redisURL()); err != nil {
		return fmt.Errorf("redis url: %w", err)
	} else {
		rdb.Close()
	}
	core := c.Upload
	core.Bucket = c.bucket()
	srv := c.Server
	srv.MaxChunkSize = core.WithDefaults().MaxChunkSize
	if c.RatePerTenant < 0 || c.RateBurst < 0 {
		return errors.New("rate limits must not be negative")
	}
	if ttl := core.WithDefaults().DirectURLTTL; c.S3.SignRole != "" && !c.DirectDoor.Off {
		// Known before the store is asked: no role's session outlasts such URLs.
		if err := s3store.CheckSignLifetime(ttl); err != nil {
			return fmt.Errorf("s3: --direct-url-ttl %v with --s3-sign-role %s: %w (--s3-sign-role off)", ttl, c.S3.SignRole, err)
		}
	}
	if c.DirectDoor.Off && c.Upload.DirectAbove > 0 {
		return errors.New("direct uploads are off (--direct-prefix off): offer none (leave out --direct-above), or turn them on (leave out --direct-prefix off)")
	}
	return errors.Join(c.S3.Validate(), c.Auth.Validate(), c.TLS.Validate(), wrapf("http %w", c.HTTPTLS.Validate()), c.Documents.Validate(), c.Staging.Validate(), core.Validate(), srv.Validate(), c.Worker.Validate(),
		c.Completer.Validate(), c.Publisher.Validate(), c.Expirer.Validate(), c.OCR.validate(), c.HTTPDoor.Validate(), c.DirectDoor.Validate(), c.HTTPServer.Validate())
}

func (c *Config) redisURL() string {
	if c.RedisURL == "" {
		return "redis://127.0.0.1:6379/0"
	}
	return c.RedisURL
}

func (c *Config) bucket() string {
	if c.Bucket == "" {
		return "chunkup"
	}
	return c.Bucket
}

func (c *Config) has(role string) bool { return len(c.Roles) == 0 || slices.Contains(c.Roles, role) }

// runsEveryRole reports whether the process runs all of AllRoles.
func (c *Config) runsEveryRole() bool {
	for _, r := range AllRoles {
		if !c.has(r) {
			return false
		}
	}
	return true
}

// App is a running chunkup process.
type App struct {
	cfg Config
	log *slog.Logger
	rdb redis.UniversalClient
	s3  *s3store.Store
	// presigner signs direct uploads' part URLs for the store's public address.
	presigner *s3store.Presigner
	hub       *notify.Hub
	outbox    *outbox.Outbox
	uploads   *uploads.Store
	docs      *documents.Store
	jobs      *ocrqueue.Queue
	grpcLis   net.Listener
	httpLis   net.Listener
	grpc      *grpc.Server
	core      *upload.Core
	api       *server.UploadService
	docsAPI   *server.DocumentService
	health    interface {
		SetServingStatus(string, healthpb.HealthCheckResponse_ServingStatus)
	}
	http      *http.Server
	door      *httpdoor.Handler // nil without the api role or an HTTP address
	doorHTTP  http.Handler      // the HTTP door as mounted (observed), for the direct door's single PUT
	worker    *chunkworker.Worker
	completer *completion.Completer
	publisher *events.Publisher
	kafka     interface{ Close() error }
	expirer   *cleanup.Expirer
	ocr       *ocrParts // nil when OCR is disabled
	// metrics and the tracer the App made itself (see observe.go)
	metrics       *metrics.Set
	observability server.Observability
	ownTracing    *tracing.Provider
}

// New connects to Redis and S3, makes sure the bucket exists, and binds the listeners,
// so addresses are known (and clients can connect) before Run.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:7070"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:7071"
	}
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		cfg.InstanceID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 20 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &App{cfg: cfg, log: cfg.Logger.With("instance_id", cfg.InstanceID)}
	ok := false
	defer func() {
		if !ok {
			a.Close()
		}
	}()

	var where string
	var err error
	if a.rdb, where, err = NewRedisClient(cfg.redisURL()); err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if err := a.rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("redis at %s: %w", where, err)
	}
	a.warnRedisConfig(ctx)
	a.hub = notify.NewHub()
	if err := a.openStores(); err != nil {
		return nil, err
	}
	if err := a.setupObservability(ctx, &cfg); err != nil {
		return nil, err
	}
	client, err := s3store.NewClient(ctx, cfg.S3)
	if err != nil {
		return nil, err
	}
	a.s3 = s3store.New(client, s3store.StoreOptions(cfg.S3)...)
	var signing aws.CredentialsProvider
	if !cfg.DirectDoor.Off {
		// Only direct uploads' URLs are signed with them: with direct uploads off there
		// is no role to assume, nor a start to stop for one.
		ttl := cmp.Or(cfg.Upload.DirectURLTTL, upload.DefaultDirectURLTTL)
		signing, err = s3store.SigningCredentials(ctx, cfg.S3, cfg.bucket(), ttl)
		if err == nil && signing != nil {
			// Assumed now, so that a role the credentials may not assume stops the
			// start rather than failing every direct upload's first signing.
			_, err = signing.Retrieve(ctx)
		}
		var noRole *s3store.NoRoleError
		switch {
		case errors.As(err, &noRole):
			a.log.Warn("direct uploads' URLs are signed with chunkup's own S3 credentials, not a write-only role's: on a store that honours an unsigned x-amz-copy-source on them (MinIO), a client could copy any object into its upload (docs/direct-uploads.md, --s3-sign-role)", "err", noRole.Err)
			signing = nil
		case err != nil:
			hint := ""
			if s := s3store.SignSession(ttl); s > time.Hour {
				hint = fmt.Sprintf(" (URLs valid for %v need a session of %v: raise the role's maximum session duration, or make --direct-url-ttl at most 45m)", ttl, s)
			}
			return nil, fmt.Errorf("s3: assume the role that signs direct uploads (--s3-sign-role %s): %w%s", cfg.S3.SignRole, err, hint)
		case signing != nil:
			a.log.Info("direct uploads' URLs are signed by an assumed role allowed only s3:PutObject in the bucket (--s3-sign-role)", "role", cfg.S3.SignRole)
		}
	}
	a.presigner = s3store.NewPresigner(client, cfg.S3.PublicEndpoint, signing)
	if err := a.s3.EnsureBucket(ctx, cfg.bucket()); err != nil {
		return nil, err
	}
	if cfg.has(RolePublisher) {
		if len(cfg.KafkaBrokers) == 0 {
			a.log.Warn("no Kafka brokers configured: events wait in Redis outboxes until a publisher with brokers runs")
		} else {
			topic := cfg.KafkaTopic
			if topic == "" {
				topic = "chunkup.uploads"
			}
			w := events.NewKafkaWriter(cfg.KafkaBrokers, topic)
			a.kafka = w
			pc := cfg.Publisher
			if pc.Logger == nil {
				pc.Logger = a.log.With("role", RolePublisher)
			}
			// Events recorded by another process wake this one by Redis unless every
			// role runs here (each such process's own publisher is then woken
			// in-process, and a notice from Redis would only be one pass more).
			var notices events.Notices
			if !cfg.runsEveryRole() {
				notices = a.outbox
			}
			if a.publisher, err = events.NewPublisher(a.outbox, w, a.hub.Events(), notices, pc); err != nil {
				return nil, err
			}
		}
	}
	ender := &cleanup.Ender{Store: a.uploads.Ends(), S3: a.s3, InstanceID: cfg.InstanceID, Logger: a.log, Metrics: a.metrics}
	if cfg.has(RoleCleanup) {
		ec := cfg.Expirer
		if ec.Logger == nil {
			ec.Logger = a.log.With("role", RoleCleanup)
		}
		if a.expirer, err = cleanup.NewExpirer(ender, ec); err != nil {
			return nil, err
		}
	}

	if err := a.setupOCR(); err != nil {
		return nil, err
	}
	if cfg.Handoff == nil && a.ocr != nil {
		cfg.Handoff = a.ocr.queue
	}
	if cfg.has(RoleCompleter) {
		cc := cfg.Completer
		if cc.InstanceID == "" {
			cc.InstanceID = cfg.InstanceID
		}
		if cc.Handoff == nil {
			cc.Handoff = cfg.Handoff
		}
		if cc.Logger == nil {
			cc.Logger = a.log.With("role", RoleCompleter)
		}
		if cc.Metrics == nil {
			cc.Metrics = a.metrics
		}
		// Uploads made ready in this process are announced to its completer; those made
		// ready by an API or workers apart are found by the sweep alone.
		cc.LocalReady = cfg.has(RoleAPI) && cfg.has(RoleWorker)
		if a.completer, err = completion.New(a.uploads.Completions(), a.s3, ender, a.hub.Ready(), cc); err != nil {
			return nil, err
		}
	}
	if cfg.has(RoleWorker) {
		wc := cfg.Worker
		if wc.Logger == nil {
			wc.Logger = a.log.With("role", RoleWorker)
		}
		if wc.Metrics == nil {
			wc.Metrics = a.metrics
		}
		if a.worker, err = chunkworker.New(a.uploads.Chunks(), a.s3, ender, wc); err != nil {
			return nil, err
		}
	}
	var guard server.Guard
	if cfg.has(RoleAPI) {
		uc := cfg.Upload
		if uc.StagedBytesBudget == 0 {
			uc.StagedBytesBudget = a.defaultBudget(ctx)
		}
		if uc.Bucket == "" {
			uc.Bucket = cfg.bucket()
		}
		if uc.InstanceID == "" {
			uc.InstanceID = cfg.InstanceID
		}
		if uc.Logger == nil {
			uc.Logger = a.log.With("role", RoleAPI)
		}
		cd := upload.Deps{Store: a.uploads, Ender: ender, Objects: a.s3}
		if !cfg.DirectDoor.Off {
			cd.Direct, cd.DirectStore = directS3{a.s3, a.presigner}, a.uploads
		}
		if a.metrics != nil {
			cd.Metrics = a.metrics
		}
		if a.worker != nil {
			cd.Local = a.worker // the local fast path: chunks go to S3 from memory
			// Adaptive staging: chunks go to S3 before they are acknowledged while this
			// worker has a free slot and S3 keeps pace.
			cd.Through = writeThrough{a.worker}
		}
		if a.completer != nil {
			// An upload whose last part was written through is completed at once, so that
			// the chunk's acknowledgement says COMPLETED.
			cd.Completer = a.completer
		}
		if a.core, err = upload.New(cd, uc); err != nil {
			return nil, err
		}
		sc := cfg.Server
		if sc.Logger == nil {
			sc.Logger = uc.Logger
		}
		if sc.MemoryWait == 0 {
			// One patience for a stream's limits: room in Redis, room in memory.
			sc.MemoryWait = a.core.Config().BudgetWait
		}
		if sc.Observe == (server.Observability{}) {
			sc.Observe = a.observability
		}
		svc, err := server.NewUploadService(server.Deps{Core: a.core, Lister: a.uploads, Progress: a.outbox, Objects: a.s3}, sc)
		if err != nil {
			return nil, err
		}
		guard = server.Guard{RatePerTenant: cfg.RatePerTenant, RateBurst: cfg.RateBurst}
		if cfg.Auth.Enabled() {
			if guard.Auth, err = server.NewAuthenticator(cfg.Auth); err != nil {
				return nil, err
			}
		} else {
			a.log.Warn("AUTHENTICATION IS OFF: every caller is let in as the empty tenant. Configure API keys or JWT verification for anything but development.")
		}
		opts := guard.ServerOptions()
		if cfg.TLS.Enabled() {
			creds, err := cfg.TLS.ServerOption()
			if err != nil {
				return nil, err
			}
			opts = append(opts, creds)
		} else if cfg.Auth.Enabled() {
			a.log.Warn("gRPC without TLS: credentials travel in clear text; terminate TLS in front of chunkup or configure a certificate")
		}
		gs, hs := server.NewGRPCServer(svc, sc.Logger, opts...)
		a.grpc, a.health, a.api = gs, hs, svc
		if err := a.registerDocuments(); err != nil {
			return nil, err
		}
		if a.grpcLis, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			return nil, fmt.Errorf("grpc listen: %w", err)
		}
	}
	if cfg.HTTPAddr != "off" {
		if a.httpLis, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			return nil, fmt.Errorf("http listen: %w", err)
		}
		a.httpLis = cfg.HTTPServer.listener(a.httpLis)
		if cfg.HTTPTLS.Enabled() {
			tc, err := cfg.HTTPTLS.Config()
			if err != nil {
				return nil, fmt.Errorf("http %w", err)
			}
			// HTTP/1.1 only: the door is written and tested for it (its 104 responses,
			// its body handling); a proxy in front may speak HTTP/2 to clients.
			tc.NextProtos = []string{"http/1.1"}
			a.httpLis = tls.NewListener(a.httpLis, tc)
		}
		mux := a.withWebhook(server.NewHTTPHandler(map[string]server.Pinger{
			"redis": func(ctx context.Context) error { return a.rdb.Ping(ctx).Err() },
		}))
		if a.api != nil && !cfg.HTTPDoor.Off {
			if err := a.setupDoor(mux, guard); err != nil {
				return nil, err
			}
		}
		if a.api != nil && !cfg.DirectDoor.Off {
			if err := a.setupDirectDoor(mux, guard); err != nil {
				return nil, err
			}
		}
		a.http = cfg.HTTPServer.server(mux)
		a.http.Handler = a.withMetrics(a.http.Handler) // GET /metrics
	}
	ok = true
	return a, nil
}

// warnRedisConfig warns when Redis is older than chunkup needs, or may evict staged
// chunks or lose them on restart.
func (a *App) warnRedisConfig(ctx context.Context) {
	if info, err := a.rdb.Info(ctx, "server").Result(); err == nil {
		if v, old := redisTooOld(info); old {
			a.log.Error("REDIS IS OLDER THAN 7.0: creating uploads fails (chunkup needs SET with NX and GET, and sharded pub/sub on a cluster)",
				"redis_version", v)
		}
	}
	if v, err := a.rdb.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil && v["maxmemory-policy"] != "noeviction" {
		a.log.Warn("REDIS MAY EVICT STAGED CHUNKS: maxmemory-policy is not noeviction; acknowledged chunks can be lost",
			"maxmemory-policy", v["maxmemory-policy"])
	}
	aof, err1 := a.rdb.ConfigGet(ctx, "appendonly").Result()
	save, err2 := a.rdb.ConfigGet(ctx, "save").Result()
	if err1 == nil && err2 == nil && aof["appendonly"] != "yes" && save["save"] == "" {
		a.log.Warn("Redis persistence is off (no AOF, no RDB snapshots): a Redis restart loses staged chunks")
	}
}

// defaultBudget is the staged-bytes budget when none is configured: half of Redis'
// maxmemory (the smallest master's on a cluster), so that staged chunks push back on
// their streams before Redis refuses writes, which would fail every tenant's requests
// at once, the small ones too; none when Redis has no maxmemory or does not say it.
func (a *App) defaultBudget(ctx context.Context) int64 {
	var most int64
	read := func(ctx context.Context, c redis.Cmdable) error {
		v, err := c.ConfigGet(ctx, "maxmemory").Result()
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(v["maxmemory"], 10, 64)
		if err != nil {
			return err
		}
		if n > 0 && (most == 0 || n < most) {
			most = n
		}
		return nil
	}
	var err error
	if cc, ok := a.rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return read(ctx, node)
		})
	} else {
		err = read(ctx, a.rdb)
	}
	switch budget := most / 2; {
	case err != nil || most == 0:
		return 0
	case budget < 2*upload.MinPartSize:
		a.log.Warn("Redis' maxmemory is too small for a staged-bytes budget (at least 20 MiB); staging has none, and a full Redis fails requests",
			"maxmemory", most)
		return 0
	default:
		a.log.Info("staged-bytes budget: half of Redis' maxmemory (--staged-bytes-budget sets another)", "budget", budget, "maxmemory", most)
		return budget
	}
}

// openStores opens the stores of the Redis keyspace, all on one client.
func (a *App) openStores() error {
	cfg := a.cfg.Staging
	var err error
	if a.outbox, err = outbox.New(a.rdb, cfg, a.hub); err != nil {
		return err
	}
	if a.uploads, err = uploads.New(a.rdb, cfg, a.outbox, a.hub); err != nil {
		return err
	}
	if a.docs, err = documents.New(a.rdb, cfg, a.outbox); err != nil {
		return err
	}
	a.jobs, err = ocrqueue.New(a.rdb, cfg)
	return err
}

// GRPCAddr is the API's address, or "" without the api role.
func (a *App) GRPCAddr() string {
	if a.grpcLis == nil {
		return ""
	}
	return a.grpcLis.Addr().String()
}

// HTTPAddr is the health endpoint's address, or "" when off.
func (a *App) HTTPAddr() string {
	if a.httpLis == nil {
		return ""
	}
	return a.httpLis.Addr().String()
}

// Uploads is the process's uploads store.
func (a *App) Uploads() *uploads.Store { return a.uploads }

// Outbox is the process's outbox store.
func (a *App) Outbox() *outbox.Outbox { return a.outbox }

// Jobs is the process's OCR job queue store.
func (a *App) Jobs() *ocrqueue.Queue { return a.jobs }

// Run serves until ctx ends, then shuts down: it stops accepting calls, gives streams
// and in-flight parts ShutdownTimeout to finish, releases what is left, and returns.
func (a *App) Run(ctx context.Context) error {
	defer a.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	if a.http != nil {
		wg.Go(func() {
			if err := a.http.Serve(a.httpLis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("http: %w", err)
			}
		})
	}
	if a.grpc != nil {
		a.setServing(healthpb.HealthCheckResponse_SERVING)
		wg.Go(func() {
			if err := a.grpc.Serve(a.grpcLis); err != nil {
				errc <- fmt.Errorf("grpc: %w", err)
			}
		})
	}
	if a.worker != nil {
		wg.Go(func() { _ = a.worker.Run(ctx) })
	}
	if a.completer != nil {
		wg.Go(func() { _ = a.completer.Run(ctx) })
	}
	if a.publisher != nil {
		// Events recorded while shutting down wait in their outbox for the next publisher.
		wg.Go(func() { _ = a.publisher.Run(ctx) })
	}
	if a.expirer != nil {
		wg.Go(func() { _ = a.expirer.Run(ctx) })
	}
	a.runOCR(ctx, &wg)
	a.log.Info("chunkup running", "grpc", a.GRPCAddr(), "http", a.HTTPAddr(), "roles", a.cfg.Roles)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	cancel() // stops the worker and completer loops, which drain in-flight work
	a.log.Info("shutting down")
	if a.grpc != nil {
		a.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
		a.api.Drain() // open streams end after their chunk and resume elsewhere
		if a.door != nil {
			a.door.Drain() // so do HTTP appends
		}
		a.docsAPI.Drain()
		done := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(a.cfg.ShutdownTimeout):
			a.grpc.Stop() // streams still open end UNAVAILABLE; clients resume elsewhere
		}
	}
	if a.http != nil {
		// Drained HTTP appends answer once the chunk they are staging is staged.
		sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
		_ = a.http.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	return runErr
}

// setServing reports st for the whole server ("") and for each service it serves by
// name, as health checks that name a service (chunkup.v1.UploadService) expect.
func (a *App) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	a.health.SetServingStatus("", st)
	for name := range a.grpc.GetServiceInfo() {
		a.health.SetServingStatus(name, st)
	}
}

// Close releases connections. Run calls it.
func (a *App) Close() {
	defer a.closeObservability()
	if a.grpcLis != nil {
		_ = a.grpcLis.Close()
	}
	if a.httpLis != nil {
		_ = a.httpLis.Close()
	}
	if a.kafka != nil {
		_ = a.kafka.Close()
	}
	if a.outbox != nil {
		_ = a.outbox.Close()
	}
	if a.rdb != nil {
		_ = a.rdb.Close()
	}
}

var _ upload.LocalWorker = (*chunkworker.Worker)(nil)

// The completer works on the uploads store's completion view.
var _ completion.Store = (*uploads.Completions)(nil)

// writeThrough adapts the worker's write-through to the API's interface.
type writeThrough struct{ w *chunkworker.Worker }

func (t writeThrough) WriteThrough(ctx context.Context, ref staging.ChunkRef, data []byte, crc uint32, last, wake bool) (upload.Written, error) {
	r, err := t.w.WriteThrough(ctx, ref, data, crc, last, wake)
	return upload.Written{Stored: r.Stored, Duplicate: r.Duplicate, Ready: r.Ready, HandOver: r.HandOver, InUse: r.InUse}, err
}

// redisTooOld reports the redis_version of an INFO server reply, and whether it is
// older than 7.0 (a reply without one, or one that does not parse, is not).
func redisTooOld(info string) (version string, old bool) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			major, _, _ := strings.Cut(v, ".")
			n, err := strconv.Atoi(major)
			return v, err == nil && n < 7
		}
	}
	return "", false
}

// wrapf is fmt.Errorf(format, err), or nil when err is nil.
func wrapf(format string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf(format, err)
}
