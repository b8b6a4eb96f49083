// Command fiber serves a small API behind the fiber (v2) middleware of
// ratelimit, with the tiers of the examples (examples/internal/limits): per
// user by plan (free or pro), a stricter tier on search, and a global one.
//
//	go run ./examples/fiber                                      # limits in memory
//	go run ./examples/fiber -redis localhost:6379                # limits shared through Redis
//	go run ./examples/fiber -redis-cluster 10.0.0.1:7000,10.0.0.2:7000
//	go run ./examples/fiber -redis localhost:6379 -redis-client rueidis
//
//	curl -i -H 'X-User: ann' 'localhost:8080/search?q=go'        # the free plan: 2 searches, then 429
//	curl -i -H 'X-User: bob' -H 'X-Plan: pro' localhost:8080/items/42
//	curl -i -H 'Authorization: Bearer s3cret' localhost:8080/items/42
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/examples/internal/limits"
	fiberlimit "github.com/bucketry/ratelimit/fiber"
	"github.com/bucketry/ratelimit/flow"
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
	app, err := newApp(limiter)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("listening on %s", ln.Addr())
	return serve(ctx, ln, app)
}

// serve serves app on ln until ctx ends, then stops accepting requests and
// lets those in flight finish, for up to 10s.
func serve(ctx context.Context, ln net.Listener, app *fiber.App) error {
	go func() {
		<-ctx.Done()
		app.ShutdownWithTimeout(10 * time.Second)
	}()
	return app.Listener(ln)
}

// newApp returns the API. Every route is limited per user, by plan, and
// globally; /search has a stricter tier of its own. A nil limiter
// (-no-limit) serves the same API without the middleware.
func newApp(limiter *core.Limiter) (*fiber.App, error) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if limiter != nil {
		user, plan, err := limits.Keys()
		if err != nil {
			return nil, err
		}
		rl, err := fiberlimit.New(limiter,
			flow.WithKey(core.ScopeUser, user),
			flow.WithPlan(plan),
		)
		if err != nil {
			return nil, err
		}
		// Once, for every route: it finds the route each request reaches.
		app.Use(rl)
	}
	app.Get("/search", search)
	app.Get("/items/:id", item)
	return app, nil
}

func search(c *fiber.Ctx) error {
	return c.SendString(fmt.Sprintf("results for %q\n", c.Query("q")))
}

func item(c *fiber.Ctx) error {
	return c.SendString("item " + c.Params("id") + "\n")
}
