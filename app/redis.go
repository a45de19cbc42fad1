package app

import (
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// NewRedisClient connects to the Redis that url names:
//
//   - redis://[user:password@]host:port/db, rediss://… (TLS), unix://…: one Redis
//     server (go-redis' ParseURL);
//   - redis+cluster://[user:password@]host1:port1,host2:port2[?options] (rediss+cluster
//     for TLS): a Redis Cluster, reached through any of the listed nodes (the client
//     learns the rest). Options are go-redis' cluster URL options (dial_timeout=3s,
//     max_redirects=8, …). A cluster has no databases: the path must be empty.
//
// The connection pool is bounded: go-redis opens connections beyond PoolSize under a
// burst unless MaxActiveConns says otherwise, so it is set to the pool size (default 10
// per CPU, per Redis node); requests beyond it wait for a connection (pool_size and
// max_active_conns in the URL override both). go-redis' pipeline pool (10) and the
// pub/sub connections come on top: one for progress notices, and one (eight on a
// cluster) for chunk wake-ups.
//
// It returns the client and the address to name in messages. It does not connect yet.
func NewRedisClient(rawURL string) (redis.UniversalClient, string, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok || (scheme != "redis+cluster" && scheme != "rediss+cluster") {
		opt, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, "", err
		}
		opt.PoolSize, opt.MaxActiveConns = boundedPool(opt.PoolSize, opt.MaxActiveConns)
		opt.Protocol = resp(opt.Protocol)
		return redis.NewClient(opt), opt.Addr, nil
	}
	// url.Parse refuses a comma-separated host list, so the first host goes into the
	// URL's host and the others into go-redis' addr options.
	hostPart, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexByte(hostPart, '/'); i >= 0 {
		if strings.Trim(hostPart[i:], "/") != "" {
			return nil, "", errors.New("a cluster URL takes no database number: a Redis Cluster has only db 0")
		}
		hostPart = hostPart[:i]
	}
	userinfo := ""
	if i := strings.LastIndexByte(hostPart, '@'); i >= 0 {
		userinfo, hostPart = hostPart[:i+1], hostPart[i+1:]
	}
	hosts := strings.Split(hostPart, ",")
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, "", fmt.Errorf("cluster URL options: %w", err)
	}
	for _, h := range hosts[1:] {
		if h = strings.TrimSpace(h); h == "" {
			return nil, "", errors.New("cluster URL has an empty host in its list")
		}
		q.Add("addr", h)
	}
	if strings.TrimSpace(hosts[0]) == "" {
		return nil, "", errors.New("cluster URL names no host (want redis+cluster://host1:port1,host2:port2)")
	}
	u := strings.TrimSuffix(scheme, "+cluster") + "://" + userinfo + strings.TrimSpace(hosts[0])
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	opt, err := redis.ParseClusterURL(u)
	if err != nil {
		return nil, "", err
	}
	// go-redis reloads its slot map on MOVED or ASK replies, and otherwise only every
	// ClusterStateReloadInterval (60 s by default). A master that died answers neither,
	// so after a failover the client would keep dialling it for up to a minute
	// (github.com/redis/go-redis/issues/3979); a reload is one CLUSTER SLOTS a second.
	opt.ClusterStateReloadInterval = time.Second
	opt.PoolSize, opt.MaxActiveConns = boundedPool(opt.PoolSize, opt.MaxActiveConns)
	opt.Protocol = resp(opt.Protocol)
	return redis.NewClusterClient(opt), "cluster " + strings.Join(opt.Addrs, ","), nil
}

// resp is the Redis protocol version to speak: the URL's (protocol=3), else RESP2.
// chunkup uses nothing only RESP3 has (client-side caching, push notifications), and
// under RESP3 go-redis peeks at a connection for pending pushes before every command (a
// read with a deadline): a tenth of the server's CPU for a direct upload's short calls
// (docs/performance.md, run I).
func resp(p int) int {
	if p == 0 {
		return 2
	}
	return p
}

// boundedPool is go-redis' default pool size (when unset), with the active connections
// capped at it (when unset).
func boundedPool(size, maxActive int) (int, int) {
	if size == 0 {
		size = 10 * runtime.GOMAXPROCS(0)
	}
	if maxActive == 0 {
		maxActive = size
	}
	return size, maxActive
}
