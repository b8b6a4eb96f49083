package multiregion

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer starts a TCP server that echoes every connection until it
// ends, stopped when t ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	return ln.Addr().String()
}

func newTestProxy(t *testing.T, target string, latency time.Duration) *Proxy {
	t.Helper()
	p, err := NewProxy(target, latency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip writes msg on c and reads it back, returning how long it took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		return 0, err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return 0, err
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo through the proxy = %q, want %q", got, msg)
	}
	return time.Since(start), nil
}

// TestProxyLatency: a round trip through the proxy takes twice the one-way
// latency, within a tolerance for scheduling on a loaded machine, and
// never less.
func TestProxyLatency(t *testing.T) {
	for _, tc := range []struct {
		name    string
		latency time.Duration
	}{
		{"none", 0},
		{"10ms", 10 * time.Millisecond},
		{"40ms", 40 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProxy(t, echoServer(t), tc.latency)
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const tolerance = 25 * time.Millisecond
			var rtts []time.Duration
			for range 5 {
				rtt, err := roundTrip(t, c, []byte("ping\n"))
				if err != nil {
					t.Fatal(err)
				}
				rtts = append(rtts, rtt)
			}
			med := percentiles(rtts).P50
			if want := 2 * tc.latency; med < want || med > want+tolerance {
				t.Errorf("median round trip through a %v proxy = %v, want %v to %v", tc.latency, med, want, want+tolerance)
			}
			for _, rtt := range rtts {
				if rtt < 2*tc.latency {
					t.Errorf("round trip %v, below twice the latency %v", rtt, tc.latency)
				}
			}
		})
	}
}

// TestProxyBytesIntact: 4 MiB of random bytes, written while reading,
// come back through a delaying proxy unchanged and in order, and a
// half-close carries through.
func TestProxyBytesIntact(t *testing.T) {
	p := newTestProxy(t, echoServer(t), 5*time.Millisecond)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, 4<<20)
	rand.Read(msg)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(msg)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read through the proxy: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write through the proxy: %v", err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo of %d bytes through the proxy: got %d bytes, not equal", len(msg), len(got))
	}
}

// TestProxyCut: a cut resets the connections in flight, swallows new
// ones (no answer within a timeout), and Heal restores service and closes
// the swallowed connections.
func TestProxyCut(t *testing.T) {
	p := newTestProxy(t, echoServer(t), time.Millisecond)
	before, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if _, err := roundTrip(t, before, []byte("up\n")); err != nil {
		t.Fatalf("before the cut: %v", err)
	}

	p.Cut()
	before.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := roundTrip(t, before, []byte("cut\n")); err == nil {
		t.Fatal("a connection from before the cut still answers")
	} else if isTimeout(err) {
		t.Fatalf("a connection from before the cut timed out instead of being reset: %v", err)
	}

	during, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial during the cut: %v (want accepted, then silence)", err)
	}
	defer during.Close()
	during.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := roundTrip(t, during, []byte("cut\n")); !isTimeout(err) {
		t.Fatalf("a connection made during the cut: err = %v, want a timeout", err)
	}

	p.Heal()
	during.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := during.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("a swallowed connection after Heal: read err = %v, want it closed", err)
	}
	after, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	after.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := roundTrip(t, after, []byte("healed\n")); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestProxyClose: Close ends the proxy's connections and refuses new
// dials, and a second Close returns nil.
func TestProxyClose(t *testing.T) {
	p, err := NewProxy(echoServer(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(t, c, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("read after Close: err = %v, want the connection closed", err)
	}
	if c, err := net.Dial("tcp", p.Addr()); err == nil {
		c.Close()
		t.Error("dial after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
}

func TestNewProxyInvalid(t *testing.T) {
	for _, tc := range []struct {
		name    string
		target  string
		latency time.Duration
	}{
		{"empty target", "", 0},
		{"negative latency", "127.0.0.1:1", -time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewProxy(tc.target, tc.latency); !errors.Is(err, ErrInvalid) {
				t.Errorf("NewProxy(%q, %v) error = %v, want ErrInvalid", tc.target, tc.latency, err)
			}
		})
	}
	if _, err := NewNet(-1); !errors.Is(err, ErrInvalid) {
		t.Errorf("NewNet(-1) error = %v, want ErrInvalid", err)
	}
}

// TestNetRoute: a route within a region is the address itself; across
// regions it is a proxy that Net.Cut cuts, including one made during the
// cut.
func TestNetRoute(t *testing.T) {
	target := echoServer(t)
	n, err := NewNet(time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got, err := n.Route(1, 1, target); err != nil || got != target {
		t.Fatalf("Route(1, 1, %q) = %q, %v, want the address itself", target, got, err)
	}
	n.Cut()
	addr, err := n.Route(0, 1, target)
	if err != nil || addr == target {
		t.Fatalf("Route(0, 1, %q) = %q, %v, want a proxy's address", target, addr, err)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := roundTrip(t, c, []byte("x")); !isTimeout(err) {
		t.Fatalf("through a route made during the cut: err = %v, want a timeout", err)
	}
	n.Heal()
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := roundTrip(t, c2, []byte("x")); err != nil {
		t.Fatalf("after Heal: %v", err)
	}
	n.Close()
	if _, err := n.Route(0, 1, target); !errors.Is(err, ErrClosed) {
		t.Errorf("Route after Close: err = %v, want ErrClosed", err)
	}
}
