package testenv

import (
	"io"
	"net"
	"sync"
	"time"
)

// Proxy is a TCP proxy on a random 127.0.0.1 port that forwards every connection to a
// target address. Fault tests point a client at Proxy.Addr and then Pause it to make the
// server look hung (connections stay open, no bytes move), PauseReplies to let requests
// reach the server while the client never hears back, or Reset it to drop every
// connection.
type Proxy struct {
	// Addr is the proxy's host:port; connect here instead of to the target.
	Addr string
	// Target is where connections are forwarded.
	Target string

	ln net.Listener
	wg sync.WaitGroup

	mu sync.Mutex
	// resumed, per direction (toTarget, toClient), is nil while that direction
	// forwards; it is closed by Resume or Close.
	resumed [2]chan struct{}
	conns   map[net.Conn]struct{}
	closed  bool
}

// The directions bytes move through a Proxy.
const (
	toTarget = iota // requests
	toClient        // replies
)

// StartProxy starts a proxy to target. It is closed when the test ends.
func StartProxy(t TB, target string) *Proxy {
	t.Helper()
	return StartProxyOn(t, "127.0.0.1:0", target)
}

// StartProxyOn starts a proxy to target listening on addr: a closed proxy's address
// again, for a client that must find its server where it was.
func StartProxyOn(t TB, addr, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("testenv: proxy listen: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), Target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Pause stops forwarding: bytes already read are held, nothing more is written either
// way, and new connections are accepted but not connected to the target until Resume.
func (p *Proxy) Pause() { p.pause(toTarget, toClient) }

// PauseReplies stops forwarding the target's bytes to clients only: requests (and new
// connections) still reach the target, which acts on them, but their replies are held
// until Resume. A client then hangs after the server did the work, as if the reply had
// been lost.
func (p *Proxy) PauseReplies() { p.pause(toClient) }

func (p *Proxy) pause(dirs ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for _, d := range dirs {
		if p.resumed[d] == nil {
			p.resumed[d] = make(chan struct{})
		}
	}
}

// Resume forwards again both ways, including what was held during the pause.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.resume()
}

// resume releases every paused direction; p.mu is held.
func (p *Proxy) resume() {
	for d, ch := range p.resumed {
		if ch != nil {
			close(ch)
			p.resumed[d] = nil
		}
	}
}

// Reset closes every current connection (both sides); new ones are proxied as usual.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes every connection. It is safe to call more than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.ln.Close()
	for c := range p.conns {
		c.Close()
	}
	p.resume()
	p.mu.Unlock()
	p.wg.Wait()
}

// gate blocks while direction dir is paused. It returns false once the proxy is closed.
func (p *Proxy) gate(dir int) bool {
	for {
		p.mu.Lock()
		ch, closed := p.resumed[dir], p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if ch == nil {
			return true
		}
		<-ch
	}
}

// track registers c so that Reset and Close can close it; false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	if !p.gate(toTarget) {
		return
	}
	upstream, err := net.DialTimeout("tcp", p.Target, 10*time.Second)
	if err != nil {
		return // the client sees its connection closed
	}
	if !p.track(upstream) {
		return
	}
	defer p.untrack(upstream)
	done := make(chan bool, 2)
	go func() { done <- p.pipe(upstream, client, toTarget) }()
	go func() { done <- p.pipe(client, upstream, toClient) }()
	// After a clean EOF one way (already passed on as a half-close), let the other way
	// finish; after an error, close both so the other way ends too.
	if eof := <-done; !eof {
		client.Close()
		upstream.Close()
	}
	<-done
}

// pipe copies from src to dst, holding bytes while direction dir is paused. At src's
// EOF it half-closes dst, so the peer sees the EOF, and returns true; on any error,
// false.
func (p *Proxy) pipe(dst, src net.Conn, dir int) (eof bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.gate(dir) {
				return false
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return false
			}
		}
		if err == io.EOF {
			if tc, ok := dst.(*net.TCPConn); ok {
				return tc.CloseWrite() == nil
			}
			return false
		}
		if err != nil {
			return false
		}
	}
}
