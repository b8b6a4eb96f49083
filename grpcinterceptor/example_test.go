package grpcinterceptor_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/grpcinterceptor"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// exampleLimiter allows each user 2 calls at once and 1 more every 2s, on
// a memory store whose clock stands still so that the output is exact.
// Production code leaves out the store: core.NewLimiter(policy).
func exampleLimiter() *core.Limiter {
	policy, err := core.NewPolicy(core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(30), 2)})
	if err != nil {
		log.Fatal(err)
	}
	store, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy, core.WithStore(store))
	if err != nil {
		log.Fatal(err)
	}
	return limiter
}

// exampleServe serves the health service with the options on 127.0.0.1:0
// and returns a client of it and a function that stops both.
func exampleServe(opts ...grpc.ServerOption) (healthpb.HealthClient, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	return healthpb.NewHealthClient(conn), func() { conn.Close(); srv.Stop() }
}

func ExampleUnaryServerInterceptor() {
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		log.Fatal(err)
	}
	unary, err := grpcinterceptor.UnaryServerInterceptor(exampleLimiter(), flow.WithKey(core.ScopeUser, user))
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServe(grpc.UnaryInterceptor(unary))
	defer stop()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err != nil {
			fmt.Printf("%v, header %v, ratelimit %q, pushback %sms\n", status.Code(err), header, trailer.Get("ratelimit"), trailer.Get(grpcinterceptor.PushbackKey))
			for _, d := range status.Convert(err).Details() {
				fmt.Printf("  %T\n", d)
			}
			continue
		}
		fmt.Printf("%v, ratelimit %q\n", status.Code(err), header.Get("ratelimit"))
	}
	// Output:
	// OK, ratelimit ["\"per-user\";r=1;t=2"]
	// OK, ratelimit ["\"per-user\";r=0;t=4"]
	// ResourceExhausted, header map[], ratelimit ["\"per-user\";r=0;t=2"], pushback [2000]ms
	//   *errdetails.RetryInfo
	//   *errdetails.QuotaFailure
}

func ExampleStreamServerInterceptor() {
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		log.Fatal(err)
	}
	stream, err := grpcinterceptor.StreamServerInterceptor(exampleLimiter(), flow.WithKey(core.ScopeUser, user))
	if err != nil {
		log.Fatal(err)
	}
	client, stop := exampleServe(grpc.StreamInterceptor(stream))
	defer stop()

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")
	for range 3 {
		ctx, cancel := context.WithCancel(ctx)
		watch, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			log.Fatal(err)
		}
		// A denied stream ends when it opens: its first Recv says so.
		resp, err := watch.Recv()
		if err != nil {
			fmt.Println(status.Code(err), watch.Trailer().Get(grpcinterceptor.PushbackKey))
		} else {
			fmt.Println(resp.GetStatus())
		}
		cancel()
	}
	// Output:
	// SERVING
	// SERVING
	// ResourceExhausted [2000]
}
