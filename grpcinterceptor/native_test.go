package grpcinterceptor_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/grpcinterceptor"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// authKey is the type of the context keys an authentication interceptor
// stores the caller's plan under, for the native functions to read.
type authKey string

// TestNativeFuncs: WithPlanFunc, WithCostFunc and WithSkipFunc read the
// call's context and full method, and their errors take the error path.
func TestNativeFuncs(t *testing.T) {
	s, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	l := flowtest.PlanLimiter(t, core.Plans{Default: "free"}, []core.Option{core.WithStore(s)},
		core.Rule{Name: "free", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerMinute(1), 2)},
		core.Rule{Name: "pro", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerMinute(1), 10)},
	)
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		t.Fatal(err)
	}
	u, err := grpcinterceptor.UnaryServerInterceptor(l,
		flow.WithKey(core.ScopeUser, user),
		grpcinterceptor.WithPlanFunc(func(ctx context.Context, _ string) (string, error) {
			switch plan, _ := ctx.Value(authKey("plan")).(string); plan {
			case "":
				return "", keyfuncs.ErrNotApplicable
			case "broken":
				return "", errors.New("billing down")
			default:
				return plan, nil
			}
		}),
		grpcinterceptor.WithCostFunc(func(ctx context.Context, fullMethod string) (int64, error) {
			switch fullMethod {
			case "/test.Service/Expensive":
				return 3, nil
			case "/test.Service/Broken":
				return 0, errors.New("price list down")
			case "/test.Service/Negative":
				return -1, nil
			}
			return 1, nil
		}),
		grpcinterceptor.WithSkipFunc(func(_ context.Context, fullMethod string) bool {
			return fullMethod == "/grpc.health.v1.Health/Check"
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		user   string
		plan   string // stored in the context, as authentication would
		method string
		code   codes.Code
		limit  string // x-ratelimit-limit; "": no fields
		left   string // x-ratelimit-remaining
	}{
		{"pro plan from the context", "alice", "pro", "/test.Service/Method", codes.OK, "10", "9"},
		{"cost by method", "alice", "pro", "/test.Service/Expensive", codes.OK, "10", "6"},
		{"no plan: the default", "bob", "", "/test.Service/Method", codes.OK, "2", "1"},
		{"skipped by method", "bob", "", "/grpc.health.v1.Health/Check", codes.OK, "", ""},
		{"skipped takes nothing", "bob", "", "/test.Service/Method", codes.OK, "2", "0"},
		{"cost by method again", "alice", "pro", "/test.Service/Expensive", codes.OK, "10", "3"},
		{"cost of what is left", "alice", "pro", "/test.Service/Expensive", codes.OK, "10", "0"},
		{"denied", "alice", "pro", "/test.Service/Method", codes.ResourceExhausted, "", ""},
		{"plan function fails", "carol", "broken", "/test.Service/Method", codes.Internal, "", ""},
		{"cost function fails", "carol", "", "/test.Service/Broken", codes.Internal, "", ""},
		{"negative cost", "carol", "", "/test.Service/Negative", codes.InvalidArgument, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := &transport{}
			ctx := callCtx(ts, "x-user", tc.user)
			if tc.plan != "" {
				ctx = context.WithValue(ctx, authKey("plan"), tc.plan)
			}
			ran := false
			_, err := u(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, func(context.Context, any) (any, error) {
				ran = true
				return "ok", nil
			})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("%s = %v, want %v", tc.method, err, tc.code)
			}
			if ran != (tc.code == codes.OK) {
				t.Errorf("%s: handler ran %v, want %v", tc.method, ran, tc.code == codes.OK)
			}
			if tc.code != codes.OK {
				return
			}
			limit, left := ts.header.Get("x-ratelimit-limit"), ts.header.Get("x-ratelimit-remaining")
			if tc.limit == "" {
				if len(ts.header) != 0 {
					t.Errorf("%s: header %v, want none", tc.method, ts.header)
				}
			} else if len(limit) != 1 || limit[0] != tc.limit || len(left) != 1 || left[0] != tc.left {
				t.Errorf("%s: x-ratelimit-limit %q, x-ratelimit-remaining %q; want %s and %s", tc.method, limit, left, tc.limit, tc.left)
			}
		})
	}
}

// TestNativeFuncsStream: on a stream, WithCostFunc prices the opening and
// WithSkipFunc exempts it; WithPerMessage, not WithCostFunc, prices its
// messages.
func TestNativeFuncsStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		method string
		msgs   []string
		code   codes.Code
		left   string // x-ratelimit-remaining after the opening; "": no fields
	}{
		// Burst 5: the opening costs 2, each message 1.
		{"priced opening", "/test.Service/Stream", []string{"a", "b", "c"}, codes.OK, "3"},
		// The 4th message finds no token until a minute after the
		// deadline: the stream ends.
		{"messages beyond the burst", "/test.Service/Stream", []string{"a", "b", "c", "d"}, codes.ResourceExhausted, "3"},
		{"skipped", "/test.Service/Internal", []string{"a", "b", "c", "d", "e", "f"}, codes.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := frozen(t, core.Rule{Name: "per-stream", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 5)})
			si, err := grpcinterceptor.StreamServerInterceptor(l,
				grpcinterceptor.WithCostFunc(func(context.Context, string) (int64, error) { return 2, nil }),
				grpcinterceptor.WithSkipFunc(func(_ context.Context, fullMethod string) bool { return fullMethod == "/test.Service/Internal" }),
				grpcinterceptor.WithPerMessage(nil))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(peer.NewContext(context.Background(), &peer.Peer{Addr: testAddr("192.0.2.1:4711")}), time.Second)
			defer cancel()
			ss := &serverStream{ctx: ctx, msgs: tc.msgs}
			var got []string
			err = si(nil, ss, &grpc.StreamServerInfo{FullMethod: tc.method, IsClientStream: true}, drain(&got))
			if status.Code(err) != tc.code {
				t.Errorf("stream of %d messages = %v, want %v", len(tc.msgs), err, tc.code)
			}
			if left := ss.header.Get("x-ratelimit-remaining"); tc.left == "" && len(ss.header) != 0 || tc.left != "" && (len(left) != 1 || left[0] != tc.left) {
				t.Errorf("header %v, want x-ratelimit-remaining %q", ss.header, tc.left)
			}
		})
	}
}

// chainUnary calls the interceptors in order around handler, as
// grpc.ChainUnaryInterceptor does.
func chainUnary(ctx context.Context, handler grpc.UnaryHandler, us ...grpc.UnaryServerInterceptor) (any, error) {
	if len(us) == 0 {
		return handler(ctx, nil)
	}
	return us[0](ctx, nil, info, func(ctx context.Context, _ any) (any, error) { return chainUnary(ctx, handler, us[1:]...) })
}

// chainStream calls the interceptors in order around handler, as
// grpc.ChainStreamInterceptor does.
func chainStream(ss grpc.ServerStream, handler grpc.StreamHandler, ss2 ...grpc.StreamServerInterceptor) error {
	if len(ss2) == 0 {
		return handler(nil, ss)
	}
	return ss2[0](nil, ss, streamInfo, func(_ any, ss grpc.ServerStream) error { return chainStream(ss, handler, ss2[1:]...) })
}

// TestInstalledTwice: the same interceptor chained twice charges a call
// once and hands its handler a context with the flow.Mark; two over one
// limiter fail it through the error path, with flow.ErrInstalledTwice to
// the error handler and a fixed codes.Internal to the client.
func TestInstalledTwice(t *testing.T) {
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		t.Fatal(err)
	}
	rule := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 2)}
	var handled []error // what the error handler was given
	opts := []grpcinterceptor.Option{
		flow.WithKey(core.ScopeUser, user),
		grpcinterceptor.WithErrorHandler(func(_ context.Context, err error) error {
			handled = append(handled, err)
			return nil // the default status
		}),
	}
	unary := func(l *core.Limiter) grpc.UnaryServerInterceptor {
		u, err := grpcinterceptor.UnaryServerInterceptor(l, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	stream := func(l *core.Limiter, more ...grpcinterceptor.Option) grpc.StreamServerInterceptor {
		s, err := grpcinterceptor.StreamServerInterceptor(l, append(opts[:len(opts):len(opts)], more...)...)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	marked := func(ctx context.Context, ran *int) {
		*ran++
		if flow.MarkFrom(ctx) == nil {
			t.Error("the handler's context has no flow.Mark")
		}
	}

	t.Run("unary chained twice", func(t *testing.T) {
		u := unary(frozen(t, rule))
		ran := 0
		h := func(ctx context.Context, _ any) (any, error) { marked(ctx, &ran); return "ok", nil }
		for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
			ts := &transport{}
			_, err := chainUnary(callCtx(ts, "x-user", "alice"), h, u, u)
			if got := status.Code(err); got != want {
				t.Fatalf("call #%d through u, u = %v, want %v", i+1, err, want)
			}
			if want == codes.OK {
				if got, left := ts.header.Get("x-ratelimit-remaining"), strconv.Itoa(1-i); len(got) != 1 || got[0] != left {
					t.Errorf("call #%d: x-ratelimit-remaining %q, want [%s]: one check, one set of fields", i+1, got, left)
				}
			}
		}
		if ran != 2 {
			t.Errorf("handler ran %d times, want 2", ran)
		}
	})
	t.Run("unary twice over one limiter", func(t *testing.T) {
		l := frozen(t, rule)
		handled = nil
		ran := 0
		_, err := chainUnary(callCtx(&transport{}, "x-user", "alice"), func(ctx context.Context, _ any) (any, error) { marked(ctx, &ran); return "ok", nil }, unary(l), unary(l))
		if status.Code(err) != codes.Internal || status.Convert(err).Message() != "ratelimit: the rate limit could not be decided" {
			t.Errorf("call through two interceptors over one limiter = %v, want Internal with the fixed message", err)
		}
		if len(handled) != 1 || !errors.Is(handled[0], flow.ErrInstalledTwice) {
			t.Errorf("error handler given %v, want one error wrapping flow.ErrInstalledTwice", handled)
		}
		if ran != 0 {
			t.Errorf("handler ran %d times, want 0", ran)
		}
	})
	t.Run("unary over two limiters", func(t *testing.T) {
		ran := 0
		_, err := chainUnary(callCtx(&transport{}, "x-user", "alice"), func(ctx context.Context, _ any) (any, error) { marked(ctx, &ran); return "ok", nil }, unary(frozen(t, rule)), unary(frozen(t, rule)))
		if err != nil || ran != 1 {
			t.Errorf("call through interceptors over two limiters = %v, handler ran %d times; want OK and 1", err, ran)
		}
	})
	t.Run("paced stream chained twice", func(t *testing.T) {
		// Burst 4: the opening and 3 messages, paced once. Paced twice,
		// the third message would wait a minute, past the deadline.
		s := stream(frozen(t, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 4)}), grpcinterceptor.WithPerMessage(nil))
		ctx, cancel := context.WithTimeout(callCtx(&transport{}, "x-user", "alice"), time.Second)
		defer cancel()
		msgs := []string{"a", "b", "c"}
		ss := &serverStream{ctx: ctx, msgs: msgs}
		var got []string
		ran := 0
		err := chainStream(ss, func(srv any, ss grpc.ServerStream) error {
			marked(ss.Context(), &ran)
			return drain(&got)(srv, ss)
		}, s, s)
		if err != nil || len(got) != len(msgs) || ran != 1 {
			t.Errorf("stream through s, s = %v after %q, handler ran %d times; want OK after %q, once", err, got, ran, msgs)
		}
		if left := ss.header.Get("x-ratelimit-remaining"); len(left) != 1 || left[0] != "3" {
			t.Errorf("x-ratelimit-remaining %q, want [3]: one check at the opening", left)
		}
	})
	t.Run("stream twice over one limiter", func(t *testing.T) {
		l := frozen(t, rule)
		handled = nil
		ran := 0
		ss := &serverStream{ctx: metadata.NewIncomingContext(peer.NewContext(context.Background(), &peer.Peer{Addr: testAddr("192.0.2.1:4711")}), metadata.Pairs("x-user", "alice"))}
		err := chainStream(ss, func(_ any, ss grpc.ServerStream) error { marked(ss.Context(), &ran); return nil }, stream(l), stream(l))
		if status.Code(err) != codes.Internal {
			t.Errorf("stream through two interceptors over one limiter = %v, want Internal", err)
		}
		if len(handled) != 1 || !errors.Is(handled[0], flow.ErrInstalledTwice) {
			t.Errorf("error handler given %v, want one error wrapping flow.ErrInstalledTwice", handled)
		}
		if ran != 0 {
			t.Errorf("handler ran %d times, want 0", ran)
		}
	})
}
