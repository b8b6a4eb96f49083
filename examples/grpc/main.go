// Command grpc serves a small gRPC service behind the interceptor of
// ratelimit, with the tiers of the examples (examples/internal/limits): per
// user by plan (free or pro), a stricter tier on Search, and a global one.
//
//	go run ./examples/grpc                                       # limits in memory
//	go run ./examples/grpc -redis localhost:6379                 # limits shared through Redis
//	go run ./examples/grpc -redis-cluster 10.0.0.1:7000,10.0.0.2:7000
//	go run ./examples/grpc -redis localhost:6379 -redis-client rueidis
//
//	cd examples/grpc
//	grpcurl -plaintext -proto items.proto -H 'x-user: ann' -d '"go"' localhost:50051 example.Items/Search
//	grpcurl -plaintext -proto items.proto -H 'x-user: bob' -H 'x-plan: pro' -d '"42"' localhost:50051 example.Items/Get
//
// An allowed call carries the rate-limit fields in its header metadata; a
// denied one ends with RESOURCE_EXHAUSTED, RetryInfo and QuotaFailure
// details naming the tier, and the grpc-retry-pushback-ms trailer.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/examples/internal/limits"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/grpcinterceptor"
)

func main() {
	addr := flag.String("addr", "localhost:50051", "listen `address`")
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
	srv, err := newServer(limiter)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("listening on %s", ln.Addr())
	return serve(ctx, ln, srv)
}

// serve serves srv on ln until ctx ends, then refuses new calls and lets
// those in flight finish, for up to 10s.
func serve(ctx context.Context, ln net.Listener, srv *grpc.Server) error {
	go func() {
		<-ctx.Done()
		force := time.AfterFunc(10*time.Second, srv.Stop)
		defer force.Stop()
		srv.GracefulStop()
	}()
	return srv.Serve(ln)
}

// newServer returns the service. Every method is limited per user, by
// plan, and globally; Search has a stricter tier of its own. A nil limiter
// (-no-limit) serves the same service without the interceptor.
func newServer(limiter *core.Limiter) (*grpc.Server, error) {
	if limiter == nil {
		srv := grpc.NewServer()
		srv.RegisterService(&itemsService, nil)
		return srv, nil
	}
	user, plan, err := limits.Keys()
	if err != nil {
		return nil, err
	}
	unary, err := grpcinterceptor.UnaryServerInterceptor(limiter,
		flow.WithKey(core.ScopeUser, user),
		flow.WithPlan(plan),
	)
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary))
	srv.RegisterService(&itemsService, nil)
	return srv, nil
}
