// Command bench measures what chunkup's guarantees cost: it uploads the same bytes
// through chunkup (the Go SDK, a `chunkup serve` process, Redis, MinIO) and straight to
// the same MinIO with the AWS SDK, taking turns in one run (and, for the large upload,
// a third: the HTTP door, as one tus PATCH), and prints each figure as a ratio
// chunkup / direct, with the targets of docs/performance.md. Two chunkup servers take
// part: --staging adaptive (the default: chunks written through to S3 while it keeps
// pace) and --staging always (every chunk staged in Redis). `make bench` runs it; the
// same table is written as JSON (-out), and a chart of the ratios and of the CPU per
// GiB of each component as SVG beside it.
//
// Redis and MinIO are real servers started through internal/testenv (as in the tests;
// CHUNKUP_TEST_S3=seaweedfs or versitygw runs it on that store instead, and the report names it);
// each chunkup server runs as its own process, with its own Redis, so that its CPU time,
// peak RSS and Redis costs are its own. Objects are verified byte for byte after each
// timed upload, outside the timing.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/chunkup/chunkup/internal/devenv"
	"github.com/chunkup/chunkup/internal/testenv"
)

// MiB is a mebibyte.
const MiB = 1 << 20

// config is what one run measures (the flags).
type config struct {
	Out         string  `json:"-"`
	Rounds      int     `json:"rounds"`
	SmallRounds int     `json:"small_rounds"`
	Large       int64   `json:"large_bytes"`
	SmallCount  int     `json:"small_count"`
	SmallSize   int64   `json:"small_bytes"`
	SmallConc   int     `json:"small_concurrency"`
	Sizes       []int64 `json:"scaling_bytes"`
	// Concurrent are the rows of many uploads at once.
	Concurrent  []concurrentCase `json:"concurrent"`
	PartSize    int64            `json:"part_bytes"`
	Concurrency int              `json:"concurrency"`
	Budget      int64            `json:"staged_bytes_budget"`
	AOF         bool             `json:"redis_aof"`
	// MallocConf is the contenders' redis-server MALLOC_CONF ("" for jemalloc's default).
	MallocConf string `json:"redis_malloc_conf"`
	ExtraArgs  string `json:"chunkup_extra_args,omitempty"`
	CPUProfile string `json:"-"`
	Skip       string `json:"skip,omitempty"`
	ExtraEnv   string `json:"chunkup_env,omitempty"`
}

func defaultConfig() config {
	return config{
		Out: "bench-results.json", Rounds: 3, SmallRounds: 7,
		Large: 1 << 30, SmallCount: 500, SmallSize: MiB, SmallConc: 16,
		Sizes:      []int64{64 * MiB, 256 * MiB, 1 << 30, 4 << 30},
		Concurrent: []concurrentCase{{Count: 256, Bytes: 256 << 10, Conc: 128}, {Count: 16, Bytes: 256 * MiB, Conc: 16}},
		PartSize:   8 * MiB, Concurrency: 4, Budget: 256 * MiB,
		MallocConf: strings.TrimPrefix(devenv.RedisMallocConf, "MALLOC_CONF="),
	}
}

func main() {
	cfg := defaultConfig()
	sizes := "64MiB,256MiB,1GiB,4GiB"
	flag.StringVar(&cfg.Out, "out", cfg.Out, "write the results as JSON to this file (empty: do not)")
	flag.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds of each comparison; each figure is the median")
	large := flag.String("large", "1GiB", "size of the large upload")
	flag.IntVar(&cfg.SmallRounds, "small-rounds", cfg.SmallRounds, "rounds of the small comparison: one round of 500 files takes a few seconds, short enough for the machine's drift to move a median of three by 20 %")
	flag.IntVar(&cfg.SmallCount, "small-count", cfg.SmallCount, "number of small uploads")
	small := flag.String("small-size", "1MiB", "size of each small upload")
	flag.IntVar(&cfg.SmallConc, "small-concurrency", cfg.SmallConc, "small uploads at once")
	flag.StringVar(&sizes, "sizes", sizes, "sizes of the scaling series, comma-separated")
	concurrent := flag.String("concurrent", "256x256KiB@128,16x256MiB@16", "rows of many uploads at once, COUNTxSIZE@CONCURRENCY, comma-separated")
	part := flag.String("part-size", "8MiB", "chunk size for chunkup, part size for the AWS transfer manager")
	flag.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "the SDK's window of unacknowledged chunks; the transfer manager's concurrency (chunkup's own part uploads use its --worker-concurrency, default 8, set with -chunkup-args)")
	budget := flag.String("budget", "256MiB", "chunkup's --staged-bytes-budget")
	flag.StringVar(&cfg.MallocConf, "redis-malloc-conf", cfg.MallocConf, "MALLOC_CONF of the contenders' redis-server, as docs/configuration.md recommends (empty: jemalloc's defaults, which cost Redis far more CPU on staged chunks)")
	flag.BoolVar(&cfg.AOF, "aof", false, "run Redis with the append-only file (appendfsync everysec), as in production")
	flag.StringVar(&cfg.ExtraArgs, "chunkup-args", "", "extra `chunkup serve` flags, space-separated (to compare settings)")
	flag.StringVar(&cfg.ExtraEnv, "chunkup-env", "", "extra environment for `chunkup serve`, space-separated NAME=VALUE (e.g. GOGC=50)")
	flag.StringVar(&cfg.Skip, "skip", "", "parts to leave out, comma-separated: large, http (the large upload through the HTTP door), small, scaling, pause, always (the --staging always contender), tusd (the peer), cli (the CLI rows), concurrent (the rows of many uploads at once) (while tuning one)")
	flag.StringVar(&cfg.CPUProfile, "cpuprofile", "", "after the measurements, run the large upload and the small ones once more through chunkup and write the server's CPU profiles to this file and to its -small variant")
	flag.Parse()

	var err error
	parse := func(s string) int64 {
		n, perr := parseSize(s)
		if perr != nil && err == nil {
			err = perr
		}
		return n
	}
	cfg.Large, cfg.SmallSize, cfg.PartSize, cfg.Budget = parse(*large), parse(*small), parse(*part), parse(*budget)
	if cfg.Concurrent, err = parseConcurrent(*concurrent); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	cfg.Sizes = nil
	for s := range strings.SplitSeq(sizes, ",") {
		cfg.Sizes = append(cfg.Sizes, parse(strings.TrimSpace(s)))
	}
	if err == nil && (cfg.Rounds < 1 || cfg.SmallRounds < 1) {
		err = errors.New("-rounds and -small-rounds must be at least 1")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}

	var rep *report
	code := testenv.Run(func(tb testenv.TB) { rep = run(tb, cfg) })
	if rep == nil || code != 0 {
		fmt.Fprintln(os.Stderr, "bench: FAILED")
		os.Exit(1)
	}
	rep.print(os.Stdout)
	if cfg.Out != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.Out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		chart := strings.TrimSuffix(cfg.Out, ".json") + ".svg"
		if err := os.WriteFile(chart, rep.chart(), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		fmt.Printf("\nwritten to %s and %s\n", cfg.Out, chart)
	}
}

// parseSize reads 8MiB, 1GiB, 512KiB or a number of bytes.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("%q is not a size (use e.g. 8MiB)", s)
			}
			return n * u.mult, nil
		}
	}
	return 0, fmt.Errorf("%q is not a size", s)
}

// report is what a run measured.
type report struct {
	When    time.Time `json:"when"`
	Machine string    `json:"machine"`
	// Store is the S3 server the bench ran on (MinIO, or SeaweedFS with
	// CHUNKUP_TEST_S3=seaweedfs).
	Store  string `json:"store"`
	Config config `json:"config"`
	// Large and Small are the adaptive contender's (the default), LargeAlways and
	// SmallAlways the --staging always contender's, against the same direct uploads.
	Large comparison `json:"large"`
	// HTTP is the large upload through the HTTP door (tus), in the same rounds.
	HTTP        httpComparison `json:"http"`
	Small       comparison     `json:"small"`
	LargeAlways comparison     `json:"large_always"`
	SmallAlways comparison     `json:"small_always"`
	Scaling     []scalingStep  `json:"scaling"`
	// Concurrent are the rows of many uploads at once.
	Concurrent []concurrentRow `json:"concurrent"`
	// TusdLarge and TusdSmall are the peer's figures beside chunkup's (nil: skipped).
	TusdLarge *peer `json:"tusd_large,omitempty"`
	TusdSmall *peer `json:"tusd_small,omitempty"`
	// CLILarge and CLISmall are the chunkup binary\'s rows (nil: skipped).
	CLILarge *cliRow `json:"cli_large,omitempty"`
	// CLIDirectLarge is `chunkup upload --direct FILE` of the large size (nil: skipped).
	CLIDirectLarge *cliRow `json:"cli_direct_large,omitempty"`
	// CLIOfferedLarge is `chunkup upload FILE` of the large size against the server's
	// offer of a direct upload (--direct-above), which the CLI takes by default; CLILarge
	// declines it (--through-server).
	CLIOfferedLarge *cliRow `json:"cli_offered_large,omitempty"`
	CLISmall        *cliRow `json:"cli_small,omitempty"`
	// CLIDirectSmall is `chunkup upload --direct --jobs N FILES…` of the small files.
	CLIDirectSmall *cliRow     `json:"cli_direct_small,omitempty"`
	Pause          pauseResult `json:"minio_paused"`
	Targets        []target    `json:"targets"`
}

// comparison is chunkup against the direct upload, each the median of the rounds.
type comparison struct {
	// Unit is what Chunkup and Direct count: MiB/s or files/s.
	Unit    string  `json:"unit"`
	Chunkup float64 `json:"chunkup"`
	Direct  float64 `json:"direct"`
	Ratio   float64 `json:"ratio"`
	// Rounds are each round's figures, chunkup then direct.
	Rounds [][2]float64 `json:"rounds"`
	// PairedRatio is the median of the rounds' own ratios (chunkup over the direct
	// upload of the same round, measured next to it), which drift between rounds moves
	// less than the ratio of the medians; printed beside Ratio, not a target.
	PairedRatio float64 `json:"paired_ratio"`
	// Cost is what chunkup used in its median round.
	Cost cost `json:"chunkup_cost"`
	// DirectMinIOCPUPerGiB and DirectClientCPUPerGiB are MinIO's and the client's CPU
	// seconds per GiB in the direct median round, to compare with Cost.
	DirectMinIOCPUPerGiB  float64 `json:"direct_minio_cpu_s_per_gib"`
	DirectClientCPUPerGiB float64 `json:"direct_client_cpu_s_per_gib"`
	// CPUBound is the direct uploads' CPU seconds per GiB (MinIO and client) over
	// chunkup's (server, Redis, MinIO and client): the ratio chunkup could reach at
	// best when every process shares one machine's cores and they are all busy.
	CPUBound float64 `json:"cpu_bound_ratio"`
}

// httpComparison is the large upload through the HTTP door against the direct upload
// (Chunkup is the door's figure, Cost its cost; ack latencies are gRPC's only), and
// against the gRPC path of the same rounds.
type httpComparison struct {
	comparison
	GRPC        float64 `json:"grpc"`
	RatioToGRPC float64 `json:"ratio_to_grpc"`
	// Patches is the same upload in PATCHes of a chunk's size (tus clients with a
	// chunkSize).
	Patches *comparison `json:"patches,omitempty"`
}

// cost is what an upload through chunkup used.
type cost struct {
	ServerPeakRSSMiB   float64 `json:"server_peak_rss_mib"`
	RedisPeakMiB       float64 `json:"redis_peak_used_memory_mib"`
	AckP50ms           float64 `json:"ack_p50_ms"`
	AckP99ms           float64 `json:"ack_p99_ms"`
	ServerCPUPerGiB    float64 `json:"server_cpu_s_per_gib"`
	RedisCPUPerGiB     float64 `json:"redis_cpu_s_per_gib"`
	MinIOCPUPerGiB     float64 `json:"minio_cpu_s_per_gib"`
	ClientCPUPerGiB    float64 `json:"client_cpu_s_per_gib"`
	ServerAllocsPerGiB float64 `json:"-"`
	// StagedShare is the share of the new chunks that were staged in Redis (S3 behind,
	// no free upload slot) rather than written through to S3 before the
	// acknowledgement, from the server's chunks_staged_total.
	StagedShare float64 `json:"staged_share"`
}

// scalingStep is one size of the scaling series.
type scalingStep struct {
	Bytes     int64   `json:"bytes"`
	SecPerGiB float64 `json:"s_per_gib"`
	MiBps     float64 `json:"mib_per_s"`
	Cost      cost    `json:"cost"`
}

// target is one of issue 7's targets and whether this run met it.
type target struct {
	Figure string  `json:"figure"`
	Value  float64 `json:"value"`
	Want   string  `json:"target"`
	Met    bool    `json:"met"`
}

func (r *report) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "chunkup bench, %s, %s\n", r.When.Format(time.RFC3339), r.Machine)
	fmt.Fprintf(w, "part/chunk %s, concurrency %d, %d rounds (medians; small files %d), staged-bytes budget %s, Redis AOF %v, Redis MALLOC_CONF %q\n\n",
		human(r.Config.PartSize), r.Config.Concurrency, r.Config.Rounds, r.Config.SmallRounds, human(r.Config.Budget), r.Config.AOF, r.Config.MallocConf)

	fmt.Fprintln(tw, "comparison\tstaging\tunit\tchunkup\tdirect\tratio\tpaired\t")
	large := fmt.Sprintf("large %s", human(r.Config.Large))
	small := fmt.Sprintf("small %d × %s @%d", r.Config.SmallCount, human(r.Config.SmallSize), r.Config.SmallConc)
	for _, c := range []struct {
		name, mode string
		cmp        comparison
	}{{large, "adaptive", r.Large}, {large, "always", r.LargeAlways}, {large + " via HTTP (tus)", "adaptive", r.HTTP.comparison},
		{large + " via HTTP (tus), " + human(r.Config.PartSize) + " PATCHes", "adaptive", ptrOr(r.HTTP.Patches)},
		{small, "adaptive", r.Small}, {small, "always", r.SmallAlways}} {
		if c.cmp.Unit != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t%.3f\t%.3f\t\n", c.name, c.mode, c.cmp.Unit, c.cmp.Chunkup, c.cmp.Direct, c.cmp.Ratio, c.cmp.PairedRatio)
		}
	}
	tw.Flush()
	for _, c := range r.Concurrent {
		fmt.Fprintf(w, "many at once, %s: chunkup %.1f MiB/s, direct %.1f MiB/s = %.3f\n", c, c.Chunkup, c.Direct, c.Ratio)
	}
	if c := r.CLILarge; c != nil {
		fmt.Fprintf(w, "CLI, chunkup upload --through-server FILE (large %s): %.1f MiB/s = %.3f × direct (%.3f × direct from the same file, %.1f MiB/s), %.3f × the SDK; CLI CPU %.2f s/GiB\n",
			human(r.Config.Large), c.CLI, c.Ratio, c.RatioFiles, c.DirectFiles, c.ToSDK, c.ClientCPUPerGiB)
	}
	if c := r.CLIOfferedLarge; c != nil {
		fmt.Fprintf(w, "CLI, chunkup upload FILE, offered a direct upload from %s (large %s): %.1f MiB/s = %.3f × direct (%.3f × direct from the same file); CLI CPU %.2f s/GiB, chunkup server CPU %.3f s/GiB\n",
			human(offerDirectFrom(r.Config)), human(r.Config.Large), c.CLI, c.Ratio, c.RatioFiles, c.ClientCPUPerGiB, c.ServerCPUPerGiB)
	}
	if c := r.CLIDirectLarge; c != nil {
		fmt.Fprintf(w, "CLI, chunkup upload --direct FILE (large %s): %.1f MiB/s = %.3f × direct (%.3f × direct from the same file); CLI CPU %.2f s/GiB, chunkup server CPU %.3f s/GiB\n",
			human(r.Config.Large), c.CLI, c.Ratio, c.RatioFiles, c.ClientCPUPerGiB, c.ServerCPUPerGiB)
	}
	if c := r.CLISmall; c != nil {
		fmt.Fprintf(w, "CLI, chunkup upload --jobs %d FILES… (small %d × %s): %.1f files/s = %.3f × PutObject (%.3f × PutObject of the same files, %.1f files/s), %.3f × the SDK; CLI CPU %.2f s/GiB\n",
			r.Config.SmallConc, r.Config.SmallCount, human(r.Config.SmallSize), c.CLI, c.Ratio, c.RatioFiles, c.DirectFiles, c.ToSDK, c.ClientCPUPerGiB)
	}
	if c := r.CLIDirectSmall; c != nil {
		fmt.Fprintf(w, "CLI, chunkup upload --direct --jobs %d FILES… (small %d × %s): %.1f files/s = %.3f × PutObject (%.3f × PutObject of the same files), %.3f × the SDK; CLI CPU %.2f s/GiB\n",
			r.Config.SmallConc, r.Config.SmallCount, human(r.Config.SmallSize), c.CLI, c.Ratio, c.RatioFiles, c.ToSDK, c.ClientCPUPerGiB)
	}
	if p := r.TusdLarge; p != nil {
		fmt.Fprintln(w, "peer "+p.line("large "+human(r.Config.Large)+" in one PATCH"))
	}
	if p := r.TusdSmall; p != nil {
		fmt.Fprintln(w, "peer "+p.line(fmt.Sprintf("small %d × %s @%d with creation-with-upload", r.Config.SmallCount, human(r.Config.SmallSize), r.Config.SmallConc)))
	}
	if r.HTTP.Chunkup > 0 {
		fmt.Fprintf(w, "HTTP door (tus, one PATCH) / gRPC SDK, large %s: %.1f / %.1f MiB/s = %.3f\n",
			human(r.Config.Large), r.HTTP.Chunkup, r.HTTP.GRPC, r.HTTP.RatioToGRPC)
	}

	fmt.Fprintln(w)
	fmt.Fprintf(tw, "chunkup\tMiB/s\ts/GiB\tserver RSS MiB\tRedis peak MiB\tack p50 ms\tack p99 ms\tCPU s/GiB server\tRedis\t%s\tclient\tstaged\t\n", r.Store)
	row := func(name string, mibps, spg float64, c cost) {
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.0f\t%.0f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f%%\t\n", name, mibps, spg,
			c.ServerPeakRSSMiB, c.RedisPeakMiB, c.AckP50ms, c.AckP99ms, c.ServerCPUPerGiB, c.RedisCPUPerGiB, c.MinIOCPUPerGiB, c.ClientCPUPerGiB, 100*c.StagedShare)
	}
	smallMiBps := func(fps float64) float64 { return fps * float64(r.Config.SmallSize) / MiB }
	if r.Large.Unit != "" {
		row(large, r.Large.Chunkup, 1024/r.Large.Chunkup, r.Large.Cost)
	}
	if r.LargeAlways.Unit != "" {
		row(large+" (always)", r.LargeAlways.Chunkup, 1024/r.LargeAlways.Chunkup, r.LargeAlways.Cost)
	}
	if r.HTTP.Chunkup > 0 {
		row(large+" via HTTP", r.HTTP.Chunkup, 1024/r.HTTP.Chunkup, r.HTTP.Cost)
	}
	if r.Small.Unit != "" {
		row("small (all files)", smallMiBps(r.Small.Chunkup), 1024/smallMiBps(r.Small.Chunkup), r.Small.Cost)
	}
	if r.SmallAlways.Unit != "" {
		row("small (always)", smallMiBps(r.SmallAlways.Chunkup), 1024/smallMiBps(r.SmallAlways.Chunkup), r.SmallAlways.Cost)
	}
	for _, s := range r.Scaling {
		row("scaling "+human(s.Bytes), s.MiBps, s.SecPerGiB, s.Cost)
	}
	for _, c := range r.Concurrent {
		row(c.String(), c.Chunkup, 1024/c.Chunkup, c.Cost)
	}
	tw.Flush()
	fmt.Fprintf(w, "direct uploads, CPU s/GiB: large %[1]s %.2[2]f client %.2[3]f, small %[1]s %.2[4]f client %.2[5]f\n", r.Store,
		r.Large.DirectMinIOCPUPerGiB, r.Large.DirectClientCPUPerGiB, r.Small.DirectMinIOCPUPerGiB, r.Small.DirectClientCPUPerGiB)
	fmt.Fprintf(w, "CPU-bound ratio (direct CPU s/GiB over chunkup's, all processes on these cores): large %.3f (always %.3f), small %.3f (always %.3f)\n",
		r.Large.CPUBound, r.LargeAlways.CPUBound, r.Small.CPUBound, r.SmallAlways.CPUBound)
	if p := r.Pause; p.Bytes > 0 {
		fmt.Fprintf(w, "%s paused %.0fs mid-upload of %s (adaptive): %.0f MiB acknowledged before, %.0f MiB during the pause; Redis peak %.0f MiB; object exact: %v\n",
			r.Store, p.PauseSeconds, human(p.Bytes), p.AckedBeforeMiB, p.AckedDuringMiB, p.RedisPeakMiB, p.Exact)
	}

	fmt.Fprintln(w)
	fmt.Fprintln(tw, "target\tvalue\twant\tmet\t")
	for _, t := range r.Targets {
		met := "yes"
		if !t.Met {
			met = "NO"
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%s\t%s\t\n", t.Figure, t.Value, t.Want, met)
	}
	tw.Flush()
}

// ptrOr is *c, or no comparison.
func ptrOr(c *comparison) comparison {
	if c == nil {
		return comparison{}
	}
	return *c
}

func human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= MiB && n%MiB == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	default:
		return fmt.Sprintf("%dB", n)
	}
}

// machine describes where the bench ran. Ratios move from one CPU to another (the
// small files measured 0.75 on run E's machine and 0.89 on run F's, with the same code),
// so the CPU's model and the instruction sets the hashes on both paths use (CRC-32C
// for chunkup, SHA-256 for the direct upload's signed bodies) are part of it.
func machine() string {
	s := fmt.Sprintf("%s/%s, %d CPUs, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return s
	}
	var model string
	var flags []string
	for line := range strings.Lines(string(info)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if flags == nil {
				have := strings.Fields(v)
				flags = []string{}
				for _, f := range []string{"sse4_2", "pclmulqdq", "avx2", "avx512f", "sha_ni"} {
					if slices.Contains(have, f) {
						flags = append(flags, f)
					}
				}
			}
		}
	}
	if model != "" {
		s += ", " + model
	}
	if len(flags) > 0 {
		s += " (" + strings.Join(flags, " ") + ")"
	}
	return s
}
