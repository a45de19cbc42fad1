package app

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestNewRedisClient(t *testing.T) {
	for _, tc := range []struct {
		url       string
		cluster   bool
		wantAddrs []string
		wantErr   string
	}{
		{url: "redis://127.0.0.1:6379/0", wantAddrs: []string{"127.0.0.1:6379"}},
		{url: "redis+cluster://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3:7002", cluster: true,
			wantAddrs: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}},
		{url: "rediss+cluster://user:secret@a:7000,b:7000/?dial_timeout=3s", cluster: true, wantAddrs: []string{"a:7000", "b:7000"}},
		{url: "redis+cluster://a:7000", cluster: true, wantAddrs: []string{"a:7000"}},
		{url: "redis+cluster://a:7000,b:7000/2", wantErr: "no database number"},
		{url: "redis+cluster://", wantErr: "names no host"},
		{url: "redis+cluster://a:7000,,b:7000", wantErr: "empty host"},
		{url: "redis+cluster://a:7000?dial_timeout=soon", wantErr: "dial_timeout"},
		{url: "http://a:7000", wantErr: "scheme"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			rdb, _, err := NewRedisClient(tc.url)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			var addrs []string
			switch c := rdb.(type) {
			case *redis.ClusterClient:
				if !tc.cluster {
					t.Fatal("got a cluster client")
				}
				addrs = c.Options().Addrs
				if strings.HasPrefix(tc.url, "rediss") && c.Options().TLSConfig == nil {
					t.Error("rediss+cluster without TLS")
				}
				if strings.Contains(tc.url, "user:secret") && (c.Options().Username != "user" || c.Options().Password != "secret") {
					t.Errorf("credentials %q/%q", c.Options().Username, c.Options().Password)
				}
			case *redis.Client:
				if tc.cluster {
					t.Fatal("got a single-node client")
				}
				addrs = []string{c.Options().Addr}
			}
			if strings.Join(addrs, ",") != strings.Join(tc.wantAddrs, ",") {
				t.Errorf("addrs %v, want %v", addrs, tc.wantAddrs)
			}
		})
	}
}

func TestRedisTooOld(t *testing.T) {
	for _, tc := range []struct {
		info, version string
		old           bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "7.0.15", false},
		{"# Server\r\nredis_version:6.2.14\r\n", "6.2.14", true},
		{"# Server\r\nredis_version:10.0.0\r\n", "10.0.0", false},
		{"# Server\r\nredis_mode:standalone\r\n", "", false}, // a Redis-compatible server that says nothing
		{"redis_version:x.y\r\n", "x.y", false},
	} {
		if v, old := redisTooOld(tc.info); v != tc.version || old != tc.old {
			t.Errorf("redisTooOld(%q) = %q, %v; want %q, %v", tc.info, v, old, tc.version, tc.old)
		}
	}
}
