package main

import (
	"context"
	"fmt"
	"log"
	"net"

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

// The quick start: a gRPC server whose calls are limited per user, by plan,
// and globally. A free user's third call within the minute ends with
// ResourceExhausted, the rate-limit fields in its trailer.
func Example_quickStart() {
	policy, err := core.NewPlanPolicy(core.Plans{Default: "free"},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerMinute(10), 2)},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerMinute(100), 20)},
		core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(1000), 2000)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy) // in memory; core.WithStore(store) for Redis
	if err != nil {
		log.Fatal(err)
	}
	user, err := keyfuncs.Metadata("x-user") // or keyfuncs.FromContext(key), after your auth interceptor
	if err != nil {
		log.Fatal(err)
	}
	plan, err := keyfuncs.Metadata("x-plan")
	if err != nil {
		log.Fatal(err)
	}
	unary, err := grpcinterceptor.UnaryServerInterceptor(limiter, flow.WithKey(core.ScopeUser, user), flow.WithPlan(plan))
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(unary))
	healthpb.RegisterHealthServer(srv, health.NewServer())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "ann", "x-plan", "free")
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		fmt.Println(status.Code(err), header.Get("ratelimit"), trailer.Get("ratelimit"))
	}
	// Output:
	// OK ["per-user";r=1;t=6] []
	// OK ["per-user";r=0;t=12] []
	// ResourceExhausted [] ["per-user";r=0;t=6]
}
