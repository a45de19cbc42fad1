package main

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/chunkup/chunkup/internal/testenv"
)

// TestRunSmall runs the whole benchmark at toy sizes, so that `make bench` keeps
// working: every contender uploads, every object is verified byte for byte (a mismatch
// fails the run), and the report holds a figure for each part.
func TestRunSmall(t *testing.T) {
	cfg := defaultConfig()
	cfg.Rounds, cfg.SmallRounds, cfg.Large, cfg.SmallCount, cfg.SmallConc = 1, 2, 24*MiB, 8, 4
	cfg.Sizes = []int64{8 * MiB, 16 * MiB}
	cfg.Concurrent = []concurrentCase{{Count: 8, Bytes: 256 << 10, Conc: 4}, {Count: 2, Bytes: 16 * MiB, Conc: 2}}
	rep := run(t, cfg)

	if rep.Large.Chunkup <= 0 || rep.Large.Direct <= 0 || rep.Small.Chunkup <= 0 || rep.Small.Direct <= 0 ||
		rep.HTTP.Chunkup <= 0 || rep.HTTP.GRPC != rep.Large.Chunkup || rep.HTTP.Cost.ServerCPUPerGiB <= 0 {
		t.Errorf("comparisons without figures: large %+v, HTTP %+v, small %+v", rep.Large, rep.HTTP, rep.Small)
	}
	if rep.LargeAlways.Chunkup <= 0 || rep.SmallAlways.Chunkup <= 0 {
		t.Errorf("--staging always without figures: large %+v, small %+v", rep.LargeAlways, rep.SmallAlways)
	}
	if !rep.Pause.Exact || rep.Pause.AckedBeforeMiB <= 0 {
		t.Errorf("%s pause: %+v", rep.Store, rep.Pause)
	}
	want := map[string]string{"": "MinIO", "minio": "MinIO", "seaweedfs": "SeaweedFS", "versitygw": "versitygw"}[os.Getenv(testenv.S3Selector)]
	if rep.Store != want {
		t.Errorf("the report names the store %q; the bench ran on %s", rep.Store, want)
	}
	if svg := string(rep.chart()); !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "small always") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Errorf("chart: %.200s", svg)
	}
	if len(rep.Scaling) != 2 || rep.Scaling[1].SecPerGiB <= 0 || rep.Scaling[1].Cost.ServerPeakRSSMiB <= 0 {
		t.Errorf("scaling: %+v", rep.Scaling)
	}
	if c := rep.Large.Cost; c.ServerCPUPerGiB <= 0 || c.RedisPeakMiB <= 0 || c.AckP99ms <= 0 {
		t.Errorf("large upload's costs not measured: %+v", c)
	}
	// Every chunk of the always contender is staged; its share, read from the
	// server's metrics, says so.
	if got := rep.SmallAlways.Cost.StagedShare; got != 1 {
		t.Errorf("--staging always: staged share %v, want 1", got)
	}
	if got := rep.Small.Cost.StagedShare; got < 0 || got > 1 {
		t.Errorf("adaptive: staged share %v, want a share", got)
	}
	if len(rep.Small.Rounds) != cfg.SmallRounds || rep.Small.PairedRatio <= 0 {
		t.Errorf("small comparison: %d rounds, paired ratio %v; want %d rounds and a ratio", len(rep.Small.Rounds), rep.Small.PairedRatio, cfg.SmallRounds)
	}
	for _, p := range []*peer{rep.TusdLarge, rep.TusdSmall} {
		if p == nil || p.Peer <= 0 || p.Chunkup <= 0 || p.ChunkupToPeer <= 0 || p.CPUPerGiB <= 0 {
			t.Errorf("the peer without figures: %+v", p)
		}
	}
	if p := rep.HTTP.Patches; p == nil || p.Chunkup <= 0 || p.Cost.ServerCPUPerGiB <= 0 {
		t.Errorf("the HTTP door in PATCHes of a chunk without figures: %+v", p)
	}
	if len(rep.Concurrent) != 2 || rep.Concurrent[1].Ratio <= 0 || rep.Concurrent[1].Cost.ServerCPUPerGiB <= 0 {
		t.Errorf("concurrent rows: %+v", rep.Concurrent)
	}
	for _, c := range []*cliRow{rep.CLILarge, rep.CLISmall, rep.CLIDirectLarge, rep.CLIDirectSmall, rep.CLIOfferedLarge} {
		if c == nil || c.CLI <= 0 || c.Ratio <= 0 || c.ToSDK <= 0 || c.ClientCPUPerGiB <= 0 || c.DirectFiles <= 0 || c.RatioFiles <= 0 {
			t.Errorf("a CLI row without figures: %+v", c)
		}
	}
	if c := rep.CLIDirectLarge; c == nil || c.ServerCPUPerGiB <= 0 {
		t.Errorf("the direct CLI row without the server's CPU: %+v", c)
	}
	var out bytes.Buffer
	rep.print(&out)
	for _, want := range []string{"large 24MiB", "large 24MiB via HTTP (tus)", "HTTP door (tus, one PATCH) / gRPC SDK", "small 8 × 1MiB @4", "scaling 16MiB", "s/GiB, 16MiB vs 8MiB", "(always)", rep.Store + " paused", "peer tusd " + testenv.TusdVersion + ", large", "creation-with-upload", "CLI, chunkup upload --through-server FILE", "CLI, chunkup upload FILE, offered a direct upload", "CLI, chunkup upload --direct FILE", "CLI, chunkup upload --jobs", "CLI, chunkup upload --direct --jobs", "many at once, 8 × 256KiB @4", "via HTTP (tus), 8MiB PATCHes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"8MiB", 8 << 20, true}, {"1GiB", 1 << 30, true}, {"512KiB", 512 << 10, true},
		{"100", 100, true}, {"7B", 7, true}, {"", 0, false}, {"MiB", 0, false}, {"-1MiB", 0, false}, {"1.5GiB", 0, false},
	} {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
