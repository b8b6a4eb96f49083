package fibertest

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
)

// trackingListener reports when the server first calls Accept, and keeps
// the connections it accepts. fasthttp registers the listener before it
// calls Accept, so from then on app.Shutdown closes it; shutting down
// before would leave Serve running.
type trackingListener struct {
	net.Listener
	once  sync.Once
	ready chan struct{}
	mu    sync.Mutex
	conns []net.Conn
}

func (l *trackingListener) Accept() (net.Conn, error) {
	l.once.Do(func() { close(l.ready) })
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// closeConns closes every connection accepted. fasthttp marks a new
// connection active before it has read a byte, and Shutdown waits for
// active connections: a client's spare connection that never carries a
// request (net/http's Transport dials some under concurrency) would hold
// it up until the client closes it, after this server's cleanup.
func (l *trackingListener) closeConns() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close() // already closed by the server or client: no matter
	}
}

// Serve serves app on a fresh loopback port until the test ends, and
// returns its base URL. It fails t if the server cannot start or stops
// with an error, or does not shut down within 10s.
func Serve(t testing.TB, app *fiber.App) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen on 127.0.0.1:0: %v", err)
	}
	tl := &trackingListener{Listener: ln, ready: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- app.Listener(tl) }()
	select {
	case <-tl.ready:
	case err := <-done:
		t.Fatalf("fiber app.Listener: %v", err)
	case <-time.After(10 * time.Second):
		ln.Close()
		t.Fatal("fiber app.Listener did not start accepting within 10s")
	}
	t.Cleanup(func() {
		// The test's requests are over: cut every connection, then stop.
		tl.closeConns()
		if err := app.ShutdownWithTimeout(10 * time.Second); err != nil {
			t.Errorf("fiber app.Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("fiber app.Listener: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

// NewApp returns an app with cfg, or the default configuration, that
// prints nothing at startup.
func NewApp(cfg ...fiber.Config) *fiber.App {
	c := fiber.Config{}
	if len(cfg) > 0 {
		c = cfg[0]
	}
	c.DisableStartupMessage = true
	return fiber.New(c)
}
