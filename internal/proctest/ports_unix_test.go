//go:build unix

package proctest

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// A port whose server closed a connection first keeps it in TIME_WAIT: a
// listener (SO_REUSEADDR) may bind it, a hold may not. FreePort takes only
// ports a hold can bind, so that a server killed there has its port held.
func TestHoldableAfterTimeWait(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	s.Close() // the server's side first: its port goes to TIME_WAIT
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatal(err)
	}
	c.Close()
	l.Close()

	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s after its connection's TIME_WAIT: %v, want it free to a listener", addr, err)
	}
	again.Close()
	if holdable(port) {
		t.Fatalf("holdable(%d) = true with a connection of its in TIME_WAIT, want false", port)
	}
	for range 50 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p == port || !holdable(p) {
			t.Fatalf("FreePort() = %d, which cannot be held (the port in TIME_WAIT is %d)", p, port)
		}
	}
}
