package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/examples/internal/apitest"
	"github.com/bucketry/ratelimit/examples/internal/limits"
	"github.com/bucketry/ratelimit/internal/redistest"
)

func init() { gin.SetMode(gin.TestMode) } // no debug banner in test logs

// TestLimits drives the server over HTTP on the in-memory store, with a
// clock that stands still: each tier denies exactly when its tokens run out.
func TestLimits(t *testing.T) {
	store, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := limits.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	apitest.CheckHTTP(t, start(t, limiter), apitest.Scenario())
}

// TestRedis runs the server on a real Redis server, as -redis does.
func TestRedis(t *testing.T) {
	redis := redistest.Standalone(t)
	limiter, closeStore, err := limits.Flags{Redis: redis.Addr}.NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeStore() })
	apitest.CheckHTTP(t, start(t, limiter), apitest.Free())
}

// start serves the API of limiter as main does, on a free loopback port,
// and returns its URL. When the test ends the server shuts down as on
// SIGTERM, and serve must return nil.
func start(t *testing.T, limiter *core.Limiter) string {
	t.Helper()
	h, err := newHandler(limiter)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, h) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve after shutdown = %v, want nil", err)
		}
	})
	return "http://" + ln.Addr().String()
}
