package grpcinterceptor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/grpcinterceptor"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// harness builds the interceptors with the suite's options passed through
// WithOptions, as a configuration shared by every adapter would be.
var harness = conformance.GRPCHarness{
	Interceptors: func(t testing.TB, l *core.Limiter, opts []keyfuncs.Option) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
		t.Helper()
		u, err := grpcinterceptor.UnaryServerInterceptor(l, grpcinterceptor.WithOptions(opts...))
		if err != nil {
			t.Fatalf("UnaryServerInterceptor: %v", err)
		}
		s, err := grpcinterceptor.StreamServerInterceptor(l, grpcinterceptor.WithOptions(opts...))
		if err != nil {
			t.Fatalf("StreamServerInterceptor: %v", err)
		}
		return u, s
	},
	PacedStream: func(t testing.TB, l *core.Limiter, opts []keyfuncs.Option) grpc.StreamServerInterceptor {
		t.Helper()
		s, err := grpcinterceptor.StreamServerInterceptor(l, grpcinterceptor.WithOptions(opts...), grpcinterceptor.WithPerMessage(nil))
		if err != nil {
			t.Fatalf("StreamServerInterceptor(WithPerMessage): %v", err)
		}
		return s
	},
}

func TestConformance(t *testing.T) {
	conformance.RunGRPCSuite(t, harness)
}

func newLimiter(t testing.TB, opts []core.Option, rules ...core.Rule) *core.Limiter {
	t.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLimiter(p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// frozen returns a limiter on a memory store whose clock stands still.
func frozen(t testing.TB, rules ...core.Rule) *core.Limiter {
	t.Helper()
	s, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	return newLimiter(t, []core.Option{core.WithStore(s)}, rules...)
}

var perUser = core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)}

func TestConstructorsReject(t *testing.T) {
	l := frozen(t, perUser)
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		t.Fatal(err)
	}
	key := grpcinterceptor.WithKey(core.ScopeUser, user)
	for _, tc := range []struct {
		name string
		l    *core.Limiter
		opts []grpcinterceptor.Option
		in   string
	}{
		{"nil limiter", nil, []grpcinterceptor.Option{key}, "nil limiter"},
		{"rule without key function", l, nil, `rule "per-user" limits scope "user"`},
		{"nil option", l, []grpcinterceptor.Option{key, nil}, "option 1 is nil"},
		{"nil key function", l, []grpcinterceptor.Option{grpcinterceptor.WithKey(core.ScopeUser, nil)}, "nil key function"},
		{"nil native key function", l, []grpcinterceptor.Option{grpcinterceptor.WithKeyFunc(core.ScopeUser, nil)}, "WithKeyFunc"},
		{"scope twice", l, []grpcinterceptor.Option{key, grpcinterceptor.WithKeyFunc(core.ScopeUser, func(context.Context, string) (string, error) { return "u", nil })}, "given twice"},
		{"nil plan", l, []grpcinterceptor.Option{key, grpcinterceptor.WithPlan(nil)}, "WithPlan"},
		{"nil cost", l, []grpcinterceptor.Option{key, grpcinterceptor.WithCost(nil)}, "WithCost"},
		{"nil skip", l, []grpcinterceptor.Option{key, grpcinterceptor.WithSkip(nil)}, "WithSkip"},
		{"nil format", l, []grpcinterceptor.Option{key, grpcinterceptor.WithHeaderFormat(nil)}, "WithHeaderFormat"},
		{"nil deny handler", l, []grpcinterceptor.Option{key, grpcinterceptor.WithDenyHandler(nil)}, "WithDenyHandler"},
		{"nil error handler", l, []grpcinterceptor.Option{key, grpcinterceptor.WithErrorHandler(nil)}, "WithErrorHandler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := grpcinterceptor.UnaryServerInterceptor(tc.l, tc.opts...)
			if u != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("UnaryServerInterceptor = %v, %v; want ErrInvalidOption mentioning %q", u != nil, err, tc.in)
			}
			s, err := grpcinterceptor.StreamServerInterceptor(tc.l, append(tc.opts, grpcinterceptor.WithPerMessage(nil))...)
			if s != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("StreamServerInterceptor = %v, %v; want ErrInvalidOption mentioning %q", s != nil, err, tc.in)
			}
		})
	}
}

// transport is a grpc.ServerTransportStream that records metadata, so that
// an interceptor can be called without a server.
type transport struct {
	header, trailer metadata.MD
	sent            bool
}

func (s *transport) Method() string { return "/test.Service/Method" }
func (s *transport) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *transport) SendHeader(md metadata.MD) error {
	s.sent = true
	return s.SetHeader(md)
}
func (s *transport) SetTrailer(md metadata.MD) error {
	s.trailer = metadata.Join(s.trailer, md)
	return nil
}

// callCtx returns the context of a call from 192.0.2.1 with metadata kv.
func callCtx(ts *transport, kv ...string) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: testAddr("192.0.2.1:4711")})
	ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	return grpc.NewContextWithServerTransportStream(ctx, ts)
}

type testAddr string

func (a testAddr) Network() string { return "tcp" }
func (a testAddr) String() string  { return string(a) }

var info = &grpc.UnaryServerInfo{FullMethod: "/test.Service/Method"}

func okHandler(context.Context, any) (any, error) { return "ok", nil }

func TestKeyFuncAndHandlers(t *testing.T) {
	l := frozen(t, perUser, core.Rule{Name: "per-method", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(1), 100)})
	var gotMethod string
	denied := status.Error(codes.PermissionDenied, "slow down")
	u, err := grpcinterceptor.UnaryServerInterceptor(l,
		grpcinterceptor.WithKeyFunc(core.ScopeUser, func(ctx context.Context, fullMethod string) (string, error) {
			gotMethod = fullMethod
			if vs := metadata.ValueFromIncomingContext(ctx, "x-user"); len(vs) > 0 {
				if vs[0] == "broken" {
					return "", errors.New("directory down")
				}
				return vs[0], nil
			}
			return "", keyfuncs.ErrNotApplicable
		}),
		grpcinterceptor.WithDenyHandler(func(ctx context.Context, d *core.Decision) error {
			if d.Rule != "per-user" {
				t.Errorf("deny handler: Decision.Rule = %q, want per-user", d.Rule)
			}
			return denied
		}),
		grpcinterceptor.WithErrorHandler(func(ctx context.Context, err error) error {
			if !strings.Contains(err.Error(), "directory down") {
				t.Errorf("error handler: %v, want the key function's error", err)
			}
			return status.Error(codes.Unavailable, "directory down")
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	ts := &transport{}
	if _, err := u(callCtx(ts, "x-user", "alice"), nil, info, okHandler); err != nil {
		t.Fatalf("first call: %v", err)
	}
	if gotMethod != info.FullMethod {
		t.Errorf("native key function saw method %q, want %q", gotMethod, info.FullMethod)
	}
	if got := ts.header.Get("ratelimit"); len(got) != 1 || got[0] != `"per-user";r=0;t=1` {
		t.Errorf("allowed call: ratelimit header %q, want the per-user tier's", got)
	}
	ts = &transport{}
	if _, err := u(callCtx(ts, "x-user", "alice"), nil, info, okHandler); err != denied {
		t.Errorf("second call: %v, want the deny handler's error", err)
	}
	if len(ts.header) != 0 || ts.sent || len(ts.trailer.Get(grpcinterceptor.PushbackKey)) != 1 {
		t.Errorf("denied call: header %v (sent %v), trailer %v; want no header and a pushback trailer", ts.header, ts.sent, ts.trailer)
	}
	if _, err := u(callCtx(&transport{}, "x-user", "broken"), nil, info, okHandler); status.Code(err) != codes.Unavailable {
		t.Errorf("failing key function: %v, want the error handler's Unavailable", err)
	}
	// Anonymous: the per-user tier does not apply.
	if _, err := u(callCtx(&transport{}), nil, info, okHandler); err != nil {
		t.Errorf("anonymous call: %v", err)
	}
}

func TestDefaultErrors(t *testing.T) {
	l := frozen(t, perUser)
	user, _ := keyfuncs.Metadata("x-user")
	u, err := grpcinterceptor.UnaryServerInterceptor(l, grpcinterceptor.WithKey(core.ScopeUser, user))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"key too long", callCtx(&transport{}, "x-user", strings.Repeat("x", core.MaxKeyLen+1)), codes.InvalidArgument},
		{"no peer", metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "dave")), codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := u(tc.ctx, nil, info, func(context.Context, any) (any, error) {
				t.Error("handler ran")
				return nil, nil
			})
			if got := status.Code(err); got != tc.want {
				t.Errorf("call = %v, want %v", err, tc.want)
			}
		})
	}
}

// TestCanceledWhileShaped: a call whose context ends while a shaping tier
// delays it ends with the context's status, and its handler does not run.
func TestCanceledWhileShaped(t *testing.T) {
	l := frozen(t, core.Rule{Name: "queue", Scope: core.ScopeGlobal, Limit: core.Shaping(core.PerMinute(1), 1, time.Hour)})
	u, err := grpcinterceptor.UnaryServerInterceptor(l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u(callCtx(&transport{}), nil, info, okHandler); err != nil {
		t.Fatalf("first call: %v", err)
	}
	ctx, cancel := context.WithCancel(callCtx(&transport{}))
	cancel() // the second call would wait a minute for its slot
	_, err = u(ctx, nil, info, func(context.Context, any) (any, error) {
		t.Error("handler ran")
		return nil, nil
	})
	if status.Code(err) != codes.Canceled {
		t.Errorf("call canceled while shaped = %v, want Canceled", err)
	}
}

func TestDenialStatus(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     core.Decision
		code  codes.Code
		delay time.Duration // RetryInfo's; 0: none
	}{
		{"limited", core.Decision{Reason: core.ReasonLimited, RetryAfter: 1500*time.Microsecond + 1, Rule: "r", Scope: core.ScopeUser}, codes.ResourceExhausted, 2 * time.Millisecond},
		{"limited under a millisecond", core.Decision{Reason: core.ReasonLimited, RetryAfter: time.Nanosecond, Rule: "r", Scope: core.ScopeUser}, codes.ResourceExhausted, time.Millisecond},
		{"limited on a millisecond", core.Decision{Reason: core.ReasonLimited, RetryAfter: 7 * time.Millisecond, Rule: "r", Scope: core.ScopeUser}, codes.ResourceExhausted, 7 * time.Millisecond},
		{"unavailable", core.Decision{Reason: core.ReasonUnavailable, RetryAfter: time.Second}, codes.Unavailable, time.Second},
		{"cost above burst", core.Decision{Reason: core.ReasonCostExceedsLimit, Rule: "r", Scope: core.ScopeUser, Cost: 5, Limit: 2}, codes.ResourceExhausted, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := grpcinterceptor.DenialStatus(&tc.d)
			if st.Code() != tc.code {
				t.Fatalf("DenialStatus = %v, want %v", st.Code(), tc.code)
			}
			var delay time.Duration
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					delay = ri.GetRetryDelay().AsDuration()
				}
			}
			if delay != tc.delay {
				t.Errorf("DenialStatus(RetryAfter %v): RetryInfo delay %v, want %v", tc.d.RetryAfter, delay, tc.delay)
			}
			if tc.delay != 0 && !strings.Contains(st.Message(), tc.delay.String()) {
				t.Errorf("DenialStatus message %q, want the delay %v", st.Message(), tc.delay)
			}
		})
	}
	if st := grpcinterceptor.DenialStatus(&core.Decision{Allowed: true}); st.Code() != codes.OK {
		t.Errorf("DenialStatus(allowed) = %v, want OK", st.Code())
	}
}
