package app

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// HTTPServerConfig bounds what clients of the HTTP address may hold: connections,
// their headers, and idle keep-alive connections. docs/security-and-limits.md gives
// what each bounds.
type HTTPServerConfig struct {
	// IdleTimeout closes a keep-alive connection that sent no request for this long.
	// Zero means 30 s.
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds the time a request's header may take to arrive. Zero
	// means 5 s.
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's header (the protocols need a few KiB: tus
	// Upload-Metadata, credentials, CORS). Zero means 64 KiB.
	MaxHeaderBytes int
	// MaxConns bounds the open connections; past it new ones wait to be accepted.
	// Zero means 4096; negative: no bound.
	MaxConns int
	// MaxConnsPerIP bounds the open connections from one client address; past it a
	// new one is closed at once. Zero means 256; negative: no bound.
	MaxConnsPerIP int
}

func (c HTTPServerConfig) withDefaults() HTTPServerConfig {
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 30 * time.Second
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 5 * time.Second
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.MaxConns == 0 {
		c.MaxConns = 4096
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = 256
	}
	return c
}

// Validate checks the configuration.
func (c HTTPServerConfig) Validate() error {
	var errs []error
	if c.IdleTimeout < 0 || c.ReadHeaderTimeout < 0 {
		errs = append(errs, errors.New("http server: timeouts must not be negative"))
	}
	if c.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("http server: the header size limit must not be negative"))
	} else if c.MaxHeaderBytes > 0 && c.MaxHeaderBytes < 4<<10 {
		errs = append(errs, fmt.Errorf("http server: a header limit of %d bytes is too small for the upload protocols (at least 4 KiB)", c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// server returns the HTTP server for handler with the configuration's bounds.
func (c HTTPServerConfig) server(handler http.Handler) *http.Server {
	c = c.withDefaults()
	// No ReadTimeout or WriteTimeout: an upload's request lasts as long as its body
	// takes; the door bounds each read (idle timeout, minimum rate) and write itself.
	return &http.Server{Handler: handler, ReadHeaderTimeout: c.ReadHeaderTimeout, IdleTimeout: c.IdleTimeout, MaxHeaderBytes: c.MaxHeaderBytes}
}

// listener wraps l with the configuration's connection bounds.
func (c HTTPServerConfig) listener(l net.Listener) net.Listener {
	c = c.withDefaults()
	if c.MaxConnsPerIP > 0 {
		l = &perIPListener{Listener: l, limit: c.MaxConnsPerIP, open: map[string]int{}}
	}
	if c.MaxConns > 0 {
		l = netutil.LimitListener(l, c.MaxConns)
	}
	return l
}

// perIPListener closes a connection at once when its client address already has
// limit open, so that one client cannot take every connection.
type perIPListener struct {
	net.Listener
	limit int
	mu    sync.Mutex
	open  map[string]int
}

func (l *perIPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(c.RemoteAddr().String())
		if err != nil {
			host = c.RemoteAddr().String()
		}
		l.mu.Lock()
		if l.open[host] >= l.limit {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.open[host]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.open[host]--; l.open[host] <= 0 {
				delete(l.open, host)
			}
		}}, nil
	}
}

// countedConn gives its place back once, when it is closed.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
