// Command gin serves a small API behind the gin middleware of ratelimit,
// with the tiers of the examples (examples/internal/limits): per user by
// plan (free or pro), a stricter tier on search, and a global one.
//
//	go run ./examples/gin                                        # limits in memory
//	go run ./examples/gin -redis localhost:6379                  # limits shared through Redis
//	go run ./examples/gin -redis-cluster 10.0.0.1:7000,10.0.0.2:7000
//	go run ./examples/gin -redis localhost:6379 -redis-client rueidis
//
//	curl -i -H 'X-User: ann' 'localhost:8080/search?q=go'        # the free plan: 2 searches, then 429
//	curl -i -H 'X-User: bob' -H 'X-Plan: pro' localhost:8080/items/42
//	curl -i -H 'Authorization: Bearer s3cret' localhost:8080/items/42
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/examples/internal/limits"
	"github.com/bucketry/ratelimit/flow"
	ginlimit "github.com/bucketry/ratelimit/gin"
)

func main() {
	addr := flag.String("addr", "localhost:8080", "listen `address`")
	var store limits.Flags
	store.Register(flag.CommandLine)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, store); err != nil {
		log.Fatal(err)
	}
}

// run serves until ctx ends (SIGINT or SIGTERM).
func run(ctx context.Context, addr string, store limits.Flags) error {
	limiter, stop, err := store.NewLimiter()
	if err != nil {
		return err
	}
	defer stop()
	h, err := newHandler(limiter)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("listening on %s", ln.Addr())
	return serve(ctx, ln, h)
}

// serve serves h on ln until ctx ends, then stops accepting requests and
// lets those in flight finish, for up to 10s.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

// newHandler returns the API. Every route is limited per user, by plan, and
// globally; /search has a stricter tier of its own. A nil limiter (-no-limit)
// serves the same API without the middleware.
func newHandler(limiter *core.Limiter) (http.Handler, error) {
	router := gin.New()
	router.Use(gin.Recovery())
	if limiter != nil {
		rl, err := middleware(limiter)
		if err != nil {
			return nil, err
		}
		router.Use(rl)
	}
	router.GET("/search", search)
	router.GET("/items/:id", item)
	return router, nil
}

// middleware returns the rate limiter's middleware, keyed by the examples'
// user and plan.
func middleware(limiter *core.Limiter) (gin.HandlerFunc, error) {
	user, plan, err := limits.Keys()
	if err != nil {
		return nil, err
	}
	return ginlimit.New(limiter,
		flow.WithKey(core.ScopeUser, user),
		flow.WithPlan(plan),
	)
}

func search(c *gin.Context) {
	c.String(http.StatusOK, "results for %q\n", c.Query("q"))
}

func item(c *gin.Context) {
	c.String(http.StatusOK, "item %s\n", c.Param("id"))
}
