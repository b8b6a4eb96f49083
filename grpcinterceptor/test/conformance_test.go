package grpcinterceptor_test

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/grpcinterceptor"
)

// harness builds the interceptors with the suite's options as they are, as
// a configuration shared by every adapter would be passed.
var harness = conformance.GRPCHarness{
	Interceptors: func(t testing.TB, l *core.Limiter, opts []flow.Option) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
		t.Helper()
		u, err := grpcinterceptor.UnaryServerInterceptor(l, opts...)
		if err != nil {
			t.Fatalf("UnaryServerInterceptor: %v", err)
		}
		s, err := grpcinterceptor.StreamServerInterceptor(l, opts...)
		if err != nil {
			t.Fatalf("StreamServerInterceptor: %v", err)
		}
		return u, s
	},
	PacedStream: func(t testing.TB, l *core.Limiter, opts []flow.Option) grpc.StreamServerInterceptor {
		t.Helper()
		paced := append(opts[:len(opts):len(opts)], grpcinterceptor.WithPerMessage(nil))
		s, err := grpcinterceptor.StreamServerInterceptor(l, paced...)
		if err != nil {
			t.Fatalf("StreamServerInterceptor(WithPerMessage): %v", err)
		}
		return s
	},
	Native: func(t testing.TB, fns conformance.GRPCNativeFuncs) []flow.Option {
		return []flow.Option{
			grpcinterceptor.WithKeyFunc(core.ScopeUser, fns.User),
			grpcinterceptor.WithPlanFunc(fns.Plan),
			grpcinterceptor.WithCostFunc(fns.Cost),
			grpcinterceptor.WithSkipFunc(fns.Skip),
		}
	},
}

func TestConformance(t *testing.T) {
	conformance.RunGRPCSuite(t, harness)
}
