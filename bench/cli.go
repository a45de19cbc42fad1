package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sys/unix"
)

// cliTurn stands for an upload with the chunkup CLI, as a user runs it, in the order of
// a round.
var cliTurn = &contender{name: "CLI"}

// cliDirectTurn stands for `chunkup upload --direct FILE` (the bytes straight to S3 with
// URLs the server signs) in the order of a round.
var cliDirectTurn = &contender{name: "CLI --direct"}

// cliOfferedTurn stands for `chunkup upload FILE` against a server that offers a direct
// upload for the file's size (--direct-above): the CLI at its defaults takes it.
var cliOfferedTurn = &contender{name: "CLI, offered direct"}

// offerDirectFrom is the size from which the bench's server offers direct uploads
// (--direct-above): 64 MiB, or the large size when that is smaller (the test's), and
// never below S3's smallest part; the small files stay below it.
func offerDirectFrom(cfg config) int64 { return max(5*MiB, min(64*MiB, cfg.Large)) }

// filesTurn stands for the direct upload of the CLI rows' input read from its file(s),
// as a user's program uploading files straight to S3 does (the direct turn reads from
// memory), in the order of a round.
var filesTurn = &contender{name: "direct from files"}

// cliRow is the chunkup binary run as a user runs it (`chunkup upload FILE`, `chunkup
// upload --jobs 16 FILES…`, its defaults otherwise) against the adaptive contender,
// beside the SDK's figure and the direct upload's of the same rounds.
type cliRow struct {
	Unit string `json:"unit"`
	// CLI, SDK and Direct are the medians of the rounds.
	CLI    float64 `json:"cli"`
	SDK    float64 `json:"sdk"`
	Direct float64 `json:"direct"`
	// Ratio is CLI / Direct (the target), ToSDK is CLI / SDK.
	Ratio float64 `json:"ratio"`
	ToSDK float64 `json:"to_sdk"`
	// DirectFiles is the median of the direct uploads of the same input read from its
	// file(s); RatioFiles is CLI / DirectFiles.
	DirectFiles float64 `json:"direct_files"`
	RatioFiles  float64 `json:"ratio_files"`
	// ClientCPUPerGiB is the CLI process's CPU seconds per GiB in its median round.
	ClientCPUPerGiB float64 `json:"cli_cpu_s_per_gib"`
	// ServerCPUPerGiB is the chunkup server's CPU seconds per GiB in the median round
	// (measured for direct uploads, whose bytes the server never sees).
	ServerCPUPerGiB float64 `json:"server_cpu_s_per_gib,omitempty"`
	// Rounds are each round's figures, the CLI's then the direct upload's.
	Rounds [][2]float64 `json:"rounds"`
}

func summarizeCLI(unit string, speeds, cpu, di, files []float64, sdk comparison) *cliRow {
	m := median(speeds)
	r := &cliRow{Unit: unit, CLI: speeds[m], SDK: sdk.Chunkup, Direct: di[median(di)], ClientCPUPerGiB: cpu[m],
		DirectFiles: files[median(files)]}
	r.Ratio, r.ToSDK, r.RatioFiles = r.CLI/r.Direct, r.CLI/r.SDK, r.CLI/r.DirectFiles
	for i := range speeds {
		r.Rounds = append(r.Rounds, [2]float64{speeds[i], di[i]})
	}
	return r
}

// runCLI runs `chunkup upload --json` of files with the extra flags against the adaptive
// contender, and returns the time it took, its CPU seconds and the uploads it printed.
func (b *bench) runCLI(files []string, extra ...string) (time.Duration, float64, []cliUpload) {
	if b.cliState == "" {
		b.cliState = b.tb.TempDir()
	}
	args := append([]string{"upload", "--server", b.adaptive.grpcAddr, "--progress", "none", "--json"}, extra...)
	cmd := exec.Command(b.bin, append(args, files...)...)
	// The CLI at its defaults: none of a developer's CHUNKUP_* settings.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CHUNKUP_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "CHUNKUP_STATE_DIR="+b.cliState)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	b.settle()
	server := b.cpu(b.adaptive.server.Pid())
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	b.cliServerCPU = b.cpu(b.adaptive.server.Pid()) - server
	if err != nil {
		b.tb.Fatalf("bench: chunkup upload of %d files: %v\n%s", len(files), err, stderr.String())
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	// With --json the CLI prints each upload as it starts, then as it ends: the last
	// line of each upload is its end.
	var ups []cliUpload
	at := map[string]int{}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		var up cliUpload
		if err := json.Unmarshal(sc.Bytes(), &up); err != nil {
			b.tb.Fatalf("bench: chunkup upload printed %q: %v", sc.Text(), err)
		}
		if i, ok := at[up.ID]; ok {
			ups[i] = up
			continue
		}
		at[up.ID] = len(ups)
		ups = append(ups, up)
	}
	if len(ups) != len(files) {
		b.tb.Fatalf("bench: chunkup upload printed %d uploads for %d files:\n%s", len(ups), len(files), stderr.String())
	}
	return took, cpu, ups
}

// cliUpload is what the CLI's --json prints of an upload (its proto names).
type cliUpload struct {
	ID    string `json:"upload_id"`
	Name  string `json:"name"`
	Key   string `json:"key"`
	State string `json:"state"`
	Size  string `json:"size"`
	// Direct: the bytes went straight to S3 (--direct, or the server's offer taken).
	Direct bool `json:"direct"`
}

// viaCLI uploads n bytes with `chunkup upload [extra] FILE` and returns the elapsed time
// and the CLI's CPU seconds per GiB. The file is written before the timing.
func (b *bench) viaCLI(n int64, direct bool, extra ...string) (time.Duration, float64) {
	start := b.next()
	path := filepath.Join(b.tb.TempDir(), "large.bin")
	b.writeFile(path, start, n)
	defer os.Remove(path)
	took, cpu, ups := b.runCLI([]string{path}, extra...)
	if ups[0].State != "UPLOAD_STATE_COMPLETED" || ups[0].Size != fmt.Sprint(n) || ups[0].Direct != direct {
		b.tb.Fatalf("bench: chunkup upload ended %s with %s bytes, direct %v; want COMPLETED with %d, direct %v", ups[0].State, ups[0].Size, ups[0].Direct, n, direct)
	}
	b.verifyAndDelete([]object{{ups[0].Key, start, n}})
	return took, cpu / (float64(n) / (1 << 30))
}

// viaDirectFile uploads n bytes from a file with the AWS transfer manager, as viaDirect
// does from memory, and returns the elapsed time. The file is written before the timing.
func (b *bench) viaDirectFile(n int64) time.Duration {
	ctx, cancel := b.ctx()
	defer cancel()
	start := b.next()
	path := filepath.Join(b.tb.TempDir(), "large-direct.bin")
	b.writeFile(path, start, n)
	defer os.Remove(path)
	key := fmt.Sprintf("direct/large-file-%d", start)
	b.settle()
	began := time.Now()
	f, err := os.Open(path)
	if err == nil {
		_, err = b.direct.UploadObject(ctx, &transfermanager.UploadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: f})
		f.Close()
	}
	took := time.Since(began)
	if err != nil {
		b.tb.Fatalf("bench: direct upload of %s from a file: %v", human(n), err)
	}
	b.verifyAndDelete([]object{{key, start, n}})
	return took
}

// smallFiles writes count small inputs to files of a new directory (outside any
// timing) and returns them, with their names' index.
func (b *bench) smallFiles(count int, prefix string) (objs []object, files []string, index map[string]int, dir string) {
	objs, data := b.smallInputs(count, prefix)
	dir = b.tb.TempDir()
	files = make([]string, count)
	index = map[string]int{}
	for i := range files {
		name := fmt.Sprintf("small-%d.bin", i)
		files[i], index[name] = filepath.Join(dir, name), i
		if err := os.WriteFile(files[i], data[i], 0o644); err != nil {
			b.tb.Fatalf("bench: %v", err)
		}
	}
	syncFS(b.tb, dir)
	return objs, files, index, dir
}

// smallDirectFiles puts count small files straight to S3 with PutObject, conc at a
// time, each read from its file, and returns the files per second.
func (b *bench) smallDirectFiles(count, conc int) float64 {
	ctx, cancel := b.ctx()
	defer cancel()
	objs, files, _, dir := b.smallFiles(count, "direct/small-file-")
	defer os.RemoveAll(dir)
	b.settle()
	began := time.Now()
	errs := b.each(count, conc, func(i int) error {
		f, err := os.Open(files[i])
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = b.s3.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(objs[i].key), Body: f, ContentLength: aws.Int64(b.cfg.SmallSize),
		})
		return err
	})
	took := time.Since(began)
	b.failOn(errs, "direct from files")
	b.verifyAndDelete(objs)
	return float64(count) / took.Seconds()
}

// smallCLI uploads count small files with one `chunkup upload --jobs conc [extra] FILES…`
// and returns the files per second and the CLI's CPU seconds per GiB.
func (b *bench) smallCLI(count, conc int, extra ...string) (float64, float64) {
	objs, files, index, dir := b.smallFiles(count, "")
	defer os.RemoveAll(dir)
	took, cpu, ups := b.runCLI(files, append([]string{"--jobs", fmt.Sprint(conc)}, extra...)...)
	for _, up := range ups {
		i, ok := index[up.Name]
		if !ok || up.State != "UPLOAD_STATE_COMPLETED" {
			b.tb.Fatalf("bench: chunkup upload printed %+v", up)
		}
		objs[i].key = up.Key
	}
	b.verifyAndDelete(objs)
	return float64(count) / took.Seconds(), cpu / (float64(int64(count)*b.cfg.SmallSize) / (1 << 30))
}

// writeFile writes the input's n bytes from start to path.
func (b *bench) writeFile(path string, start, n int64) {
	f, err := os.Create(path)
	if err != nil {
		b.tb.Fatalf("bench: %v", err)
	}
	if _, err := f.ReadFrom(b.src.reader(start, n)); err != nil {
		b.tb.Fatalf("bench: %v", err)
	}
	// On disk before the timing: the kernel's writing it back must not fall into the
	// CLI's turn (it stays in the page cache, as a file just written does for a user).
	if err := f.Sync(); err != nil {
		b.tb.Fatalf("bench: %v", err)
	}
	if err := f.Close(); err != nil {
		b.tb.Fatalf("bench: %v", err)
	}
}

// syncFS writes back what is waiting to be written to the file system of dir (syncfs(2)),
// so that it does not fall into a timing.
func syncFS(tb interface{ Fatalf(string, ...any) }, dir string) {
	f, err := os.Open(dir)
	if err != nil {
		tb.Fatalf("bench: %v", err)
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		tb.Fatalf("bench: syncfs %s: %v", dir, err)
	}
}
