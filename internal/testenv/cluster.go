package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSlots is the number of hash slots of every Redis Cluster.
	clusterSlots = 16384
	// clusterBusOffset is what Redis adds to a node's port for its cluster bus port.
	clusterBusOffset = 10000
	// clusterMasters is how many masters StartRedisCluster creates, each with one replica.
	clusterMasters = 3
	// clusterNodeTimeout is the nodes' cluster-node-timeout. Short, so that a killed
	// master is failed over within a few seconds, yet long enough for a busy machine.
	clusterNodeTimeout = time.Second
	// failoverTimeout bounds WaitFailover and Start. A failover takes about two node
	// timeouts plus up to a second of election delay; the rest is slack for a loaded
	// machine.
	failoverTimeout = 60 * time.Second
)

// RedisCluster is a local Redis Cluster: three masters and three replicas (one each),
// each node a Debian redis-server on 127.0.0.1 with its own directory and log. Which node
// is a master changes with failovers; ask Masters and MasterFor rather than relying on
// the order of Addrs.
type RedisCluster struct {
	// Addrs is every node's host:port: the three masters first as created (serving slots
	// 0-5460, 5461-10922, 10923-16383), then their replicas in the same order. A node
	// keeps its address across Kill and Start.
	Addrs []string

	nodes map[string]*clusterNode // by address

	mu    sync.Mutex
	admin map[string]*redis.Client // one plain client per node, for CLUSTER and INFO
}

// clusterNode is one node: a Redis for its port, directory, log and process. Its
// cluster identity is in nodes.conf in its directory, so it survives Kill and Start.
type clusterNode struct {
	*Redis
	killed time.Time // when Kill last killed it; guarded by RedisCluster.mu
}

// StartRedisCluster starts six redis-servers in cluster mode, joins them with
// `redis-cli --cluster create --cluster-replicas 1`, and waits until every node reports
// cluster_state:ok with all 16384 slots assigned and every replica is in sync with its
// master. Like StartRedis it keeps no RDB snapshots and no AOF (unless WithAOF), and
// WithArgs adds redis-server arguments. cluster-node-timeout is 1 s and
// cluster-replica-validity-factor 0, so a replica always takes over a killed master
// quickly. The test fails at once if redis-server or redis-cli is missing. Every node
// is killed when the test ends.
func StartRedisCluster(t TB, opts ...RedisOption) *RedisCluster {
	t.Helper()
	start := time.Now()
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := RedisServerBinary()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	cli, err := redisCLIBinary(bin)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	appendonly := "no"
	if cfg.aof {
		appendonly = "yes"
	}
	args := []string{
		"--bind", "127.0.0.1",
		"--daemonize", "no",
		"--logfile", "", // log to stdout, which goes to the node's LogFile
		"--save", "",
		"--appendonly", appendonly,
		"--appendfsync", "always",
		"--maxmemory-policy", "noeviction",
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in --dir
		"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout / time.Millisecond)),
		"--cluster-replica-validity-factor", "0",
		// A master waits this long for more replicas before it streams a full sync;
		// the default 5 s would make every start and rejoin 5 s slower.
		"--repl-diskless-sync-delay", "0",
	}

	c := &RedisCluster{nodes: map[string]*clusterNode{}, admin: map[string]*redis.Client{}}
	base := t.TempDir()
	var all []*clusterNode
	t.Cleanup(func() {
		if t.Failed() {
			c.logState(t, all)
		}
		for _, n := range all {
			n.Kill()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, a := range c.admin {
			_ = a.Close()
		}
	})
	used := map[int]bool{} // ports and bus ports of the nodes started so far
	for i := range 2 * clusterMasters {
		dir := filepath.Join(base, fmt.Sprintf("node%d", i))
		n := &clusterNode{Redis: &Redis{
			Dir:     filepath.Join(dir, "data"),
			LogFile: filepath.Join(dir, "redis.log"),
			bin:     bin,
			args:    append(append([]string{"--dir", filepath.Join(dir, "data")}, args...), cfg.extra...),
		}}
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		all = append(all, n)
		c.startNode(t, n, used)
		c.nodes[n.Addr] = n
		c.Addrs = append(c.Addrs, n.Addr)
	}

	// redis-cli makes the first three addresses masters, in order, when all nodes share
	// one host; which replica it gives to which master it may shuffle. The order of Addrs
	// is fixed from what the cluster reports below.
	create := append([]string{"--cluster", "create"}, c.Addrs...)
	create = append(create, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := runCommand(cli, create, startTimeout); err != nil {
		t.Fatalf("testenv: %s %s: %v\n%s", cli, strings.Join(create, " "), err, out)
	}
	// Every node may be healthy before the first node's view lists every replica under
	// its master (gossip travels after the replicas have synced), so the order is part
	// of what is waited for.
	ready := func() error {
		if err := c.healthy(); err != nil {
			return err
		}
		return c.orderAddrs()
	}
	if err := waitFor(startTimeout, nil, ready); err != nil {
		t.Fatalf("testenv: redis cluster %v did not become ready: %v", c.Addrs, err)
	}
	t.Logf("testenv: redis cluster ready in %v: masters %v, replicas %v",
		time.Since(start).Round(time.Millisecond), c.Addrs[:clusterMasters], c.Addrs[clusterMasters:])
	return c
}

// startNode starts n on a port P such that P and its bus port P+10000 were both free a
// moment ago and belong to no other node, retrying with new ports if redis-server could
// not bind one of them after all.
func (c *RedisCluster) startNode(t TB, n *clusterNode, used map[int]bool) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		port, err := clusterPort(used)
		if err != nil {
			t.Fatalf("testenv: redis cluster: %v", err)
		}
		n.Port = port
		n.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		err = n.start()
		if err == nil {
			used[port], used[port+clusterBusOffset] = true, true
			return
		}
		if attempt == 3 || !strings.Contains(tailFile(n.LogFile, 10), "in use") {
			t.Fatalf("testenv: redis-server (cluster node) on %s: %v\nlog:\n%s", n.Addr, err, tailFile(n.LogFile, 40))
		}
		// The failed run may have written a nodes.conf naming the port it could not use.
		_ = os.Remove(filepath.Join(n.Dir, "nodes.conf"))
	}
}

// clusterPort returns a port P ≤ 55535 such that P and P+10000 are free now and neither
// is in used.
func clusterPort(used map[int]bool) (int, error) {
	for range 200 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		if p+clusterBusOffset > 65535 || used[p] || used[p+clusterBusOffset] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+clusterBusOffset)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("found no free port P with P+10000 free too")
}

// redisCLIBinary returns redis-cli from the directory of redis-server (so that the two
// match when CHUNKUP_REDIS_SERVER points elsewhere), else from PATH.
func redisCLIBinary(server string) (string, error) {
	p := filepath.Join(filepath.Dir(server), "redis-cli")
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return p, nil
	}
	p, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", fmt.Errorf("redis-cli is neither next to %s nor on PATH: a Redis Cluster needs it "+
			"to create the cluster; install Debian's redis-tools (redis-server depends on it)", server)
	}
	return p, nil
}

// runCommand runs a short-lived program like any other child of this package (own
// process group, Pdeathsig), kills it after timeout, and returns its combined output.
func runCommand(path string, args []string, timeout time.Duration) (string, error) {
	var out syncBuffer
	p, err := startProc(path, args, os.Environ(), &out, &out)
	if err != nil {
		return "", err
	}
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.kill()
		return out.String(), fmt.Errorf("still running after %v; killed it", timeout)
	}
	return out.String(), p.err
}

// URL is the cluster as a URL listing every node: redis+cluster://h1:p1,h2:p2,...
func (c *RedisCluster) URL() string { return "redis+cluster://" + strings.Join(c.Addrs, ",") }

// Client returns a go-redis cluster client seeded with every node, closed when t ends.
// It sends reads to masters (ReadOnly is off) and follows go-redis's default number of
// redirects (MaxRedirects 0 means 3).
//
// It reloads the slot map every second. go-redis (v9.23) reloads it only on MOVED or ASK
// and every ClusterStateReloadInterval (default 60 s); a master that was killed answers
// neither, so with the default a client keeps dialling it for up to a minute after the
// failover (github.com/redis/go-redis/issues/3979). With 1 s, commands for the killed
// master's slots fail until about a second after WaitFailover returns; retry them.
func (c *RedisCluster) Client(t TB) *redis.ClusterClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      slices.Clone(c.Addrs),
		ClusterStateReloadInterval: time.Second,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Masters returns the addresses of the nodes that serve slots now, in the order of
// Addrs. Where nodes disagree during a failover, the claim with the newest configuration
// epoch wins, as it does in the cluster.
func (c *RedisCluster) Masters(t TB) []string {
	t.Helper()
	owners, err := c.slotOwners()
	if err != nil {
		t.Fatalf("testenv: redis cluster masters: %v", err)
	}
	var masters []string
	for _, a := range c.Addrs {
		if slices.Contains(owners[:], a) {
			masters = append(masters, a)
		}
	}
	return masters
}

// MasterFor returns the address of the master that serves key's hash slot now (by the
// same rule as Masters). Hash tags count: "{user1}.a" and "{user1}.b" share a slot.
func (c *RedisCluster) MasterFor(t TB, key string) string {
	t.Helper()
	var slot int64
	err := c.onLiveNode(func(ctx context.Context, a *redis.Client) (err error) {
		slot, err = a.ClusterKeySlot(ctx, key).Result()
		return err
	})
	if err != nil {
		t.Fatalf("testenv: redis cluster: CLUSTER KEYSLOT %q: %v", key, err)
	}
	owners, err := c.slotOwners()
	if err != nil {
		t.Fatalf("testenv: redis cluster master for %q: %v", key, err)
	}
	return owners[slot]
}

// Kill kills the node at addr with SIGKILL, as a crash would, and waits for it to exit.
// It does nothing if the node is not running.
func (c *RedisCluster) Kill(t TB, addr string) {
	t.Helper()
	n := c.node(t, addr)
	if !nodeRunning(n) {
		return
	}
	n.Kill()
	c.mu.Lock()
	n.killed = time.Now()
	c.mu.Unlock()
}

// WaitFailover waits until the cluster has recovered from killing the node killed: the
// slots it served (if it was a master) are served by its promoted replica, and every
// live node reports cluster_state:ok, sees all slots served by live nodes, agrees with
// the others on who serves which slot, and, if it is a replica, is in sync with its
// master. It fails t if that takes longer than a minute or killed is running.
func (c *RedisCluster) WaitFailover(t TB, killed string) {
	t.Helper()
	n := c.node(t, killed)
	if nodeRunning(n) {
		t.Fatalf("testenv: redis cluster WaitFailover(%s): the node is running; Kill it first", killed)
	}
	start := time.Now()
	if err := waitFor(failoverTimeout, nil, c.healthy); err != nil {
		t.Fatalf("testenv: redis cluster: no failover from %s: %v", killed, err)
	}
	since := ""
	c.mu.Lock()
	if !n.killed.IsZero() {
		since = fmt.Sprintf(", %v after Kill", time.Since(n.killed).Round(time.Millisecond))
	}
	c.mu.Unlock()
	t.Logf("testenv: redis cluster recovered from losing %s in %v%s; masters now %v",
		killed, time.Since(start).Round(time.Millisecond), since, c.Masters(t))
}

// Start starts the killed node at addr again, with its port, directory and cluster
// identity (nodes.conf), and waits until it has rejoined: every node, this one too,
// reports cluster_state:ok and agrees on who serves which slot, and every replica is in
// sync. A master that was failed over while down comes back as a replica of the node
// that took its place. If one of its ports is taken, Start tries again for a few
// seconds. It does nothing but wait if the node is running.
func (c *RedisCluster) Start(t TB, addr string) {
	t.Helper()
	n := c.node(t, addr)
	start := time.Now()
	// The node must get its own ports back: they are its address in the cluster. While it
	// was down another process may have taken one, often only for a moment (both lie in
	// the range the kernel picks outgoing connections' ports from).
	for attempt := 1; ; attempt++ {
		err := n.start()
		if err == nil {
			break
		}
		if attempt == 5 || !strings.Contains(tailFile(n.LogFile, 10), "in use") {
			t.Fatalf("testenv: restart redis cluster node %s: %v\nlog:\n%s", addr, err, tailFile(n.LogFile, 40))
		}
		time.Sleep(time.Second)
	}
	// healthy counts the node as running now: the others must stop flagging it as failed,
	// and a former master must have turned into a replica and synced.
	if err := waitFor(failoverTimeout, nil, c.healthy); err != nil {
		t.Fatalf("testenv: redis cluster node %s did not rejoin: %v\nlog:\n%s", addr, err, tailFile(n.LogFile, 40))
	}
	t.Logf("testenv: redis cluster node %s rejoined in %v", addr, time.Since(start).Round(time.Millisecond))
}

func (c *RedisCluster) node(t TB, addr string) *clusterNode {
	t.Helper()
	n := c.nodes[addr]
	if n == nil {
		t.Fatalf("testenv: %s is not a node of the redis cluster %v", addr, c.Addrs)
	}
	return n
}

func nodeRunning(n *clusterNode) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p != nil && !n.p.exited()
}

// liveAddrs returns the addresses of the running nodes, in the order of Addrs.
func (c *RedisCluster) liveAddrs() []string {
	var live []string
	for _, a := range c.Addrs {
		if nodeRunning(c.nodes[a]) {
			live = append(live, a)
		}
	}
	return live
}

// adminClient returns the plain client for the node at addr. It does not retry: a node
// that does not answer is reported at once, and the callers poll.
func (c *RedisCluster) adminClient(addr string) *redis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.admin[addr]
	if a == nil {
		a = redis.NewClient(&redis.Options{
			Addr: addr, MaxRetries: -1, PoolSize: 2,
			DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		})
		c.admin[addr] = a
	}
	return a
}

// call runs f against the node at addr with a deadline.
func (c *RedisCluster) call(addr string, f func(context.Context, *redis.Client) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f(ctx, c.adminClient(addr))
}

// onLiveNode runs f against the first running node that answers.
func (c *RedisCluster) onLiveNode(f func(context.Context, *redis.Client) error) error {
	err := errors.New("no node is running")
	for _, a := range c.liveAddrs() {
		if err = c.call(a, f); err == nil {
			return nil
		}
		err = fmt.Errorf("%s: %w", a, err)
	}
	return err
}

// clusterView is one node's CLUSTER NODES.
type clusterView struct {
	byAddr map[string]*clusterEntry
	self   *clusterEntry
}

// clusterEntry is one line of CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot>...
type clusterEntry struct {
	id, addr string
	flags    []string
	masterID string // "-" for a master
	epoch    int64  // the node's config epoch (its master's, for a replica)
	slots    [][2]int
}

func (e *clusterEntry) has(flag string) bool { return slices.Contains(e.flags, flag) }

// failing reports whether the viewer considers the node failed or possibly failed.
func (e *clusterEntry) failing() bool { return e.has("fail") || e.has("fail?") || e.has("noaddr") }

func parseClusterNodes(s string) (*clusterView, error) {
	v := &clusterView{byAddr: map[string]*clusterEntry{}}
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: too few fields", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		epoch, err := strconv.ParseInt(f[6], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("CLUSTER NODES line %q: config epoch: %v", line, err)
		}
		e := &clusterEntry{id: f[0], addr: addr, flags: strings.Split(f[2], ","), masterID: f[3], epoch: epoch}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") { // a slot being migrated or imported
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			if !isRange {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || l < 0 || h >= clusterSlots || l > h {
				return nil, fmt.Errorf("CLUSTER NODES line %q: bad slot range %q", line, r)
			}
			e.slots = append(e.slots, [2]int{l, h})
		}
		v.byAddr[addr] = e
		if e.has("myself") {
			v.self = e
		}
	}
	if v.self == nil {
		return nil, errors.New("CLUSTER NODES has no line for myself")
	}
	return v, nil
}

// views returns the CLUSTER NODES of the running nodes, by address. With all, a node that
// does not answer is an error; else it is left out, unless none answers.
func (c *RedisCluster) views(all bool) (map[string]*clusterView, error) {
	views := map[string]*clusterView{}
	lastErr := errors.New("no node is running")
	for _, a := range c.liveAddrs() {
		var s string
		err := c.call(a, func(ctx context.Context, r *redis.Client) (err error) {
			s, err = r.ClusterNodes(ctx).Result()
			return err
		})
		var v *clusterView
		if err == nil {
			v, err = parseClusterNodes(s)
		}
		if err != nil {
			lastErr = fmt.Errorf("%s: CLUSTER NODES: %w", a, err)
			if all {
				return nil, lastErr
			}
			continue
		}
		views[a] = v
	}
	if len(views) == 0 {
		return nil, lastErr
	}
	return views, nil
}

// owners returns, by slot, the address of the master that serves it in v ("" if none).
func (v *clusterView) owners() *[clusterSlots]string {
	var o [clusterSlots]string
	for _, e := range v.byAddr {
		if !e.has("master") {
			continue
		}
		for _, r := range e.slots {
			for s := r[0]; s <= r[1]; s++ {
				o[s] = e.addr
			}
		}
	}
	return &o
}

// slotOwners merges the running nodes' views: for each slot, the master that claims it
// with the highest config epoch, the rule by which the cluster itself settles conflicts.
func (c *RedisCluster) slotOwners() (*[clusterSlots]string, error) {
	views, err := c.views(false)
	if err != nil {
		return nil, err
	}
	var owners [clusterSlots]string
	var epochs [clusterSlots]int64
	for _, v := range views {
		for _, e := range v.byAddr {
			if !e.has("master") {
				continue
			}
			for _, r := range e.slots {
				for s := r[0]; s <= r[1]; s++ {
					if owners[s] == "" || e.epoch > epochs[s] {
						owners[s], epochs[s] = e.addr, e.epoch
					}
				}
			}
		}
	}
	return &owners, nil
}

// healthy returns nil if every running node reports cluster_state:ok with all slots
// assigned and served, knows every node, sees every slot served by a running node as
// all other running nodes do, does not flag a running node as failed, and, if it is a
// replica, has its replication link up.
func (c *RedisCluster) healthy() error {
	live := c.liveAddrs()
	for _, a := range live {
		var info, repl string
		if err := c.call(a, func(ctx context.Context, r *redis.Client) (err error) {
			if info, err = r.ClusterInfo(ctx).Result(); err != nil {
				return err
			}
			repl, err = r.Info(ctx, "replication").Result()
			return err
		}); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		fields := infoFields(info + repl)
		for k, want := range map[string]string{
			"cluster_state":          "ok",
			"cluster_slots_assigned": strconv.Itoa(clusterSlots),
			"cluster_slots_ok":       strconv.Itoa(clusterSlots),
			"cluster_known_nodes":    strconv.Itoa(len(c.Addrs)),
		} {
			if fields[k] != want {
				return fmt.Errorf("%s: %s:%s, want %s", a, k, fields[k], want)
			}
		}
		if fields["role"] == "slave" && fields["master_link_status"] != "up" {
			return fmt.Errorf("%s: replica of %s:%s has master_link_status:%s",
				a, fields["master_host"], fields["master_port"], fields["master_link_status"])
		}
	}
	views, err := c.views(true)
	if err != nil {
		return err
	}
	var first *[clusterSlots]string
	for _, a := range live {
		v := views[a]
		for _, b := range live {
			if e := v.byAddr[b]; e == nil || e.failing() {
				return fmt.Errorf("%s does not see %s as healthy yet", a, b)
			}
		}
		o := v.owners()
		for s, owner := range o {
			if !slices.Contains(live, owner) {
				return fmt.Errorf("%s sees slot %d served by %q, which is not running", a, s, owner)
			}
			if first != nil && first[s] != owner {
				return fmt.Errorf("%s sees slot %d served by %s, %s by %s", a, s, owner, live[0], first[s])
			}
		}
		if first == nil {
			first = o
		}
	}
	return nil
}

// infoFields parses the key:value lines of INFO and CLUSTER INFO.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// orderAddrs orders Addrs as documented: the masters by their first slot, then each
// master's replica in the same order.
func (c *RedisCluster) orderAddrs() error {
	views, err := c.views(true)
	if err != nil {
		return err
	}
	v := views[c.Addrs[0]]
	byID := map[string]*clusterEntry{}
	for _, a := range c.Addrs {
		e := v.byAddr[a]
		if e == nil {
			return fmt.Errorf("%s does not know %s", c.Addrs[0], a)
		}
		byID[e.id] = e
	}
	var masters []*clusterEntry
	for _, e := range byID {
		if e.has("master") && len(e.slots) > 0 {
			masters = append(masters, e)
		}
	}
	if len(masters) != clusterMasters {
		return fmt.Errorf("%d masters with slots, want %d", len(masters), clusterMasters)
	}
	slices.SortFunc(masters, func(a, b *clusterEntry) int { return a.slots[0][0] - b.slots[0][0] })
	order := make([]string, 0, len(c.Addrs))
	for _, m := range masters {
		order = append(order, m.addr)
	}
	for _, m := range masters {
		var replicas []string
		for _, e := range byID {
			if e.masterID == m.id {
				replicas = append(replicas, e.addr)
			}
		}
		if len(replicas) != 1 {
			return fmt.Errorf("master %s has replicas %v, want one", m.addr, replicas)
		}
		order = append(order, replicas[0])
	}
	c.Addrs = order
	return nil
}

// logState logs what a failed test needs to see: the cluster as a running node sees it,
// and the end of every node's log.
func (c *RedisCluster) logState(t TB, nodes []*clusterNode) {
	var s string
	err := c.onLiveNode(func(ctx context.Context, a *redis.Client) (err error) {
		s, err = a.ClusterNodes(ctx).Result()
		return err
	})
	if err == nil {
		t.Logf("testenv: redis cluster CLUSTER NODES:\n%s", s)
	}
	for _, n := range nodes {
		state := "running"
		if !nodeRunning(n) {
			state = "not running"
		}
		t.Logf("testenv: redis cluster node %s (%s) log (last lines):\n%s", n.Addr, state, tailFile(n.LogFile, 20))
	}
}
