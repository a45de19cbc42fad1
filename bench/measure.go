package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	chunkupv1 "github.com/chunkup/chunkup/gen/chunkup/v1"
	"github.com/chunkup/chunkup/internal/metrics"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times (100 on every Linux
// architecture Go supports).
const clockTicks = 100

// cpuSeconds is the CPU time process pid has used: the sum of its threads' time on a
// CPU from /proc/PID/task/*/schedstat, in nanoseconds, where the kernel keeps it, else
// user plus system time from /proc/PID/stat. The latter comes in clock ticks of 10 ms,
// too coarse for the costs of a few hundredths of a second the bench compares (a direct
// upload's server CPU, goal 0.05 s/GiB, is 5 ticks). A thread's time leaves the sum
// when the thread exits; the processes measured are Go programs, whose runtime keeps
// its threads (it ends one only when a goroutine locked to it exits).
func cpuSeconds(pid int) (float64, error) {
	if s, err := schedSeconds(pid); err == nil {
		return s, nil
	}
	return statSeconds(pid)
}

// schedSeconds sums the first field of each thread's schedstat: its time on a CPU in
// nanoseconds.
func schedSeconds(pid int) (float64, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var ns int64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if errors.Is(err, fs.ErrNotExist) {
			continue // the thread exited since the listing
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("%s/%s/schedstat: empty", dir, t.Name())
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/%s/schedstat: %w", dir, t.Name(), err)
		}
		ns += n
	}
	return float64(ns) / 1e9, nil
}

// statSeconds is user plus system time from /proc/PID/stat, in clock ticks.
func statSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, may hold spaces: the fields that matter come after its
	// closing parenthesis (utime and stime are fields 14 and 15).
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime %q %q", pid, f[11], f[12])
	}
	return (utime + stime) / clockTicks, nil
}

// resetPeakRSS resets the kernel's high-water mark of pid's resident set (VmHWM), so
// that peakRSS then reports the peak since this call.
func resetPeakRSS(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// peakRSS is pid's VmHWM in MiB: the peak resident set since the process started or
// since resetPeakRSS.
func peakRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// redisInfo reads numeric fields of INFO section.
func redisInfo(ctx context.Context, rdb *redis.Client, section string, fields ...string) (map[string]float64, error) {
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && slices.Contains(fields, k) {
			if out[k], err = strconv.ParseFloat(v, 64); err != nil {
				return nil, fmt.Errorf("INFO %s: %s: %w", section, k, err)
			}
		}
	}
	return out, nil
}

// redisPeak samples Redis used_memory every 20 ms (Redis' own
// used_memory_peak cannot be reset between runs) until stop is called, and returns the
// peak in MiB. A peak shorter than the interval can be missed; staged chunks stay for
// the time it takes to upload them, far longer.
func redisPeak(rdb *redis.Client) (stop func() float64) {
	ctx, cancel := context.WithCancel(context.Background())
	var peak float64
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if m, err := redisInfo(ctx, rdb, "memory", "used_memory"); err == nil {
				peak = max(peak, m["used_memory"])
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() float64 {
		cancel()
		wg.Wait()
		return peak / (1 << 20)
	}
}

// redisCPU is the CPU time redis-server has used, from INFO cpu.
func redisCPU(ctx context.Context, rdb *redis.Client) (float64, error) {
	m, err := redisInfo(ctx, rdb, "cpu", "used_cpu_user", "used_cpu_sys")
	if err != nil {
		return 0, err
	}
	return m["used_cpu_user"] + m["used_cpu_sys"], nil
}

// ackLatency records, for every chunk the SDK sends, the time from handing it to gRPC to
// its acknowledgement, by intercepting the client's UploadChunk streams.
type ackLatency struct {
	mu      sync.Mutex
	samples []time.Duration
}

func (a *ackLatency) dialOption() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, conn, method, opts...)
		if err != nil || method != chunkupv1.UploadService_UploadChunk_FullMethodName {
			return s, err
		}
		return &timedStream{ClientStream: s, a: a, sent: map[uint32]time.Time{}}, nil
	})
}

// reset forgets the samples so far.
func (a *ackLatency) reset() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.samples = a.samples[:0]
}

// quantiles returns the p50 and p99 latencies in milliseconds.
func (a *ackLatency) quantiles() (p50, p99 float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.samples) == 0 {
		return 0, 0
	}
	s := slices.Clone(a.samples)
	slices.Sort(s)
	at := func(q float64) float64 {
		return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / float64(time.Millisecond)
	}
	return at(0.50), at(0.99)
}

type timedStream struct {
	grpc.ClientStream
	a    *ackLatency
	mu   sync.Mutex
	sent map[uint32]time.Time
}

func (s *timedStream) SendMsg(m any) error {
	if r, ok := m.(*chunkupv1.UploadChunkRequest); ok {
		s.mu.Lock()
		s.sent[r.ChunkNumber] = time.Now()
		s.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *timedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*chunkupv1.UploadChunkResponse); ok && err == nil {
		s.mu.Lock()
		at, ok := s.sent[r.ChunkNumber]
		delete(s.sent, r.ChunkNumber)
		s.mu.Unlock()
		if ok {
			s.a.mu.Lock()
			s.a.samples = append(s.a.samples, time.Since(at))
			s.a.mu.Unlock()
		}
	}
	return err
}

// chunkOutcomes reads the server's chunkup_chunks_staged_total from its /metrics, by
// outcome (new, written_through, duplicate).
func chunkOutcomes(ctx context.Context, httpAddr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read chunkup's metrics: %w", err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse chunkup's metrics: %w", err)
	}
	out := map[string]float64{}
	if f := families[metrics.Namespace+"_chunks_staged_total"]; f != nil {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out, nil
}
