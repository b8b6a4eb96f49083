package grpcinterceptor_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/grpcinterceptor"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// discard is a grpc.ServerTransportStream that drops metadata, so that the
// benchmarks measure the interceptor and not a fake transport.
type discard struct{}

func (discard) Method() string               { return "/bench.Service/Method" }
func (discard) SetHeader(metadata.MD) error  { return nil }
func (discard) SendHeader(metadata.MD) error { return nil }
func (discard) SetTrailer(metadata.MD) error { return nil }

// benchUnary returns the unary interceptor over a memory store with a
// per-user and a per-method tier that never deny within a benchmark.
func benchUnary(b *testing.B) grpc.UnaryServerInterceptor {
	b.Helper()
	limit := core.TokenBucket(core.PerSecond(1_000_000_000), 1_000_000_000)
	l := flowtest.Limiter(b,
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: limit},
		core.Rule{Name: "per-method", Scope: core.ScopeEndpoint, Limit: limit},
	)
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		b.Fatal(err)
	}
	u, err := grpcinterceptor.UnaryServerInterceptor(l, flow.WithKey(core.ScopeUser, user))
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// benchCtx is the context of a call from user, as grpc-go makes it: a TCP
// peer, incoming metadata and the transport stream.
func benchCtx(user string) context.Context {
	addr := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-user", user))
	return grpc.NewContextWithServerTransportStream(ctx, discard{})
}

// BenchmarkUnaryAllowed is the interceptor's overhead on an allowed call:
// keys from the peer, the method and the metadata, a two-tier decision on
// the memory store, and the header metadata.
func BenchmarkUnaryAllowed(b *testing.B) {
	u := benchUnary(b)
	ctx := benchCtx("alice")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := u(ctx, nil, info, okHandler); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUnaryAllowedParallel is BenchmarkUnaryAllowed from GOMAXPROCS
// goroutines, each its own user.
func BenchmarkUnaryAllowedParallel(b *testing.B) {
	u := benchUnary(b)
	var id atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := benchCtx("user-" + strconv.FormatInt(id.Add(1), 10))
		for pb.Next() {
			if _, err := u(ctx, nil, info, okHandler); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkUnaryNoHeaders is BenchmarkUnaryAllowed without header metadata
// on allowed calls (WithHeadersOnAllow(false)): the cost of the decision
// alone.
func BenchmarkUnaryNoHeaders(b *testing.B) {
	limit := core.TokenBucket(core.PerSecond(1_000_000_000), 1_000_000_000)
	l := flowtest.Limiter(b, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: limit})
	user, _ := keyfuncs.Metadata("x-user")
	u, err := grpcinterceptor.UnaryServerInterceptor(l, flow.WithKey(core.ScopeUser, user), flow.WithHeadersOnAllow(false))
	if err != nil {
		b.Fatal(err)
	}
	ctx := benchCtx("alice")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := u(ctx, nil, info, okHandler); err != nil {
			b.Fatal(err)
		}
	}
}
