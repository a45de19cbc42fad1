package testenv_test

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/chunkup/chunkup/internal/testenv"
)

// TestProxyPauseReplies: with replies paused, requests (also on a new connection) reach
// the target, and their replies arrive only after Resume.
func TestProxyPauseReplies(t *testing.T) {
	// An echo server behind the proxy that reports every line it gets.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 10)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	p := testenv.StartProxy(t, ln.Addr().String())
	send := func(c net.Conn, msg string) {
		t.Helper()
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case line := <-got:
			if line != msg+"\n" {
				t.Fatalf("the target got %q, want %q", line, msg)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%q did not reach the target", msg)
		}
	}
	read := func(c net.Conn, r *bufio.Reader, wait time.Duration) (string, error) {
		c.SetReadDeadline(time.Now().Add(wait))
		return r.ReadString('\n')
	}

	c1, r1 := dialProxy(t, p)
	send(c1, "one")
	if line, err := read(c1, r1, 5*time.Second); err != nil || line != "one\n" {
		t.Fatalf("reply through the proxy = %q, %v", line, err)
	}

	p.PauseReplies()
	send(c1, "two")
	c2, r2 := dialProxy(t, p)
	send(c2, "three")
	for _, c := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{c1, r1}, {c2, r2}} {
		if line, err := read(c.c, c.r, 200*time.Millisecond); !isTimeout(err) {
			t.Fatalf("a reply came through while replies are paused: %q, %v", line, err)
		}
	}

	p.Resume()
	if line, err := read(c1, r1, 5*time.Second); err != nil || line != "two\n" {
		t.Fatalf("after Resume, held reply = %q, %v", line, err)
	}
	if line, err := read(c2, r2, 5*time.Second); err != nil || line != "three\n" {
		t.Fatalf("after Resume, new connection's held reply = %q, %v", line, err)
	}
}
