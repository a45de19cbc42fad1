package testenv_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chunkup/chunkup/internal/testenv"
)

// TestRedisCluster starts a cluster, spreads keys over its masters, kills the master of
// one key, and checks that a replica takes over with the data, that the cluster client
// follows, and that the killed node comes back as a replica.
func TestRedisCluster(t *testing.T) {
	c := testenv.StartRedisCluster(t)
	ctx := ctxT(t, 3*time.Minute)

	if len(c.Addrs) != 6 {
		t.Fatalf("Addrs = %v, want 6 nodes", c.Addrs)
	}
	if want := "redis+cluster://" + strings.Join(c.Addrs, ","); c.URL() != want {
		t.Fatalf("URL() = %q, want %q", c.URL(), want)
	}
	masters := c.Masters(t)
	if !slices.Equal(masters, c.Addrs[:3]) {
		t.Fatalf("Masters() = %v, want the first three Addrs %v", masters, c.Addrs[:3])
	}

	cc := c.Client(t)
	const n = 300
	for i := range n {
		if err := cc.Set(ctx, fmt.Sprintf("key:%d", i), fmt.Sprintf("v%d", i), 0).Err(); err != nil {
			t.Fatalf("SET key:%d: %v", i, err)
		}
	}
	// Make sure the replicas have every write before a master dies: replication is
	// asynchronous.
	for _, m := range masters {
		a := redis.NewClient(&redis.Options{Addr: m})
		got, err := a.Do(ctx, "WAIT", 1, 10_000).Int()
		a.Close()
		if err != nil || got != 1 {
			t.Fatalf("WAIT 1 on %s = %d, %v; want 1 replica", m, got, err)
		}
	}

	// MasterFor agrees with the cluster client's routing and with the nodes themselves:
	// its master answers for the key, another master redirects.
	seen := map[string]bool{}
	for i := 0; i < n; i += 10 {
		key := fmt.Sprintf("key:%d", i)
		m := c.MasterFor(t, key)
		seen[m] = true
		node, err := cc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatalf("MasterForKey(%s): %v", key, err)
		}
		if got := node.Options().Addr; got != m {
			t.Fatalf("MasterFor(%s) = %s, cluster client routes to %s", key, m, got)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("keys landed on masters %v, want all three", seen)
	}
	key := "key:0"
	victim := c.MasterFor(t, key)
	for _, m := range masters {
		a := redis.NewClient(&redis.Options{Addr: m})
		err := a.Get(ctx, key).Err()
		a.Close()
		if m == victim && err != nil {
			t.Fatalf("GET %s on its master %s: %v", key, m, err)
		}
		if m != victim && (err == nil || !strings.HasPrefix(err.Error(), "MOVED ")) {
			t.Fatalf("GET %s on %s, not its master %s: %v, want MOVED", key, m, victim, err)
		}
	}

	// Kill the key's master: its replica takes over, with the data.
	c.Kill(t, victim)
	killed := time.Now()
	c.WaitFailover(t, victim)
	t.Logf("failover done %v after the kill", time.Since(killed).Round(time.Millisecond))
	promoted := c.MasterFor(t, key)
	if promoted == victim {
		t.Fatalf("MasterFor(%s) is still the killed %s", key, victim)
	}
	after := c.Masters(t)
	if len(after) != 3 || slices.Contains(after, victim) || !slices.Contains(after, promoted) {
		t.Fatalf("Masters() after failover = %v (killed %s, promoted %s)", after, victim, promoted)
	}
	retryUntil(t, ctx, func(ctx context.Context) error {
		if got, err := cc.Get(ctx, key).Result(); err != nil || got != "v0" {
			return fmt.Errorf("GET %s = %q, %v", key, got, err)
		}
		return cc.Set(ctx, key, "after-failover", 0).Err()
	})
	for i := range n {
		k := fmt.Sprintf("key:%d", i)
		want := fmt.Sprintf("v%d", i)
		if i == 0 {
			want = "after-failover"
		}
		retryUntil(t, ctx, func(ctx context.Context) error {
			if got, err := cc.Get(ctx, k).Result(); err != nil || got != want {
				return fmt.Errorf("GET %s = %q, %v; want %q", k, got, err, want)
			}
			return nil
		})
	}

	// The killed node comes back as a replica of the node that took its place.
	c.Start(t, victim)
	if got := c.Masters(t); !slices.Equal(got, after) {
		t.Fatalf("Masters() after restart = %v, want %v", got, after)
	}
	a := redis.NewClient(&redis.Options{Addr: victim})
	defer a.Close()
	info, err := a.Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(promoted, ":")
	for _, want := range []string{"role:slave", "master_port:" + port, "master_link_status:up"} {
		if !strings.Contains(info, want+"\r\n") {
			t.Fatalf("restarted %s: INFO replication lacks %q:\n%s", victim, want, info)
		}
	}
	if err := a.Get(ctx, key).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Fatalf("GET %s on the restarted replica: %v, want MOVED", key, err)
	}
	retryUntil(t, ctx, func(ctx context.Context) error {
		got, err := cc.Get(ctx, key).Result()
		if err != nil || got != "after-failover" {
			return fmt.Errorf("GET %s = %q, %v", key, got, err)
		}
		return nil
	})
}

// retryUntil calls f until it returns nil or a 30 s deadline (within ctx) passes. Each call
// gets that deadline, so one hung call cannot outlast it.
func retryUntil(t *testing.T, ctx context.Context, f func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		err := f(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("still failing at the deadline: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
