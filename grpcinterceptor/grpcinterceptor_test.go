package grpcinterceptor_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

// frozen returns a limiter on a memory store whose clock stands still.
func frozen(t testing.TB, rules ...core.Rule) *core.Limiter {
	t.Helper()
	s, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	return flowtest.LimiterWith(t, []core.Option{core.WithStore(s)}, rules...)
}

var perUser = core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)}

// TestConstructorsReject: both constructors refuse what every adapter's
// does and this package's own nil options; the stream's, also when given
// WithPerMessage, which makes it build a second engine.
func TestConstructorsReject(t *testing.T) {
	invalid := flowtest.NilOptions(grpcinterceptor.WithKeyFunc(core.ScopeUser, nil), grpcinterceptor.WithDenyHandler(nil), grpcinterceptor.WithErrorHandler(nil))
	invalid[`nethttp.WithKeyFunc("user") is an option of nethttp, given to grpcinterceptor`] = flow.NativeKey("nethttp", core.ScopeUser, func(*http.Request) (string, error) { return "u", nil })
	invalid["WithPlanFunc"] = grpcinterceptor.WithPlanFunc(nil)
	invalid["WithCostFunc"] = grpcinterceptor.WithCostFunc(nil)
	invalid["WithSkipFunc"] = grpcinterceptor.WithSkipFunc(nil)
	c := flowtest.Constructor{
		Adapter: "grpcinterceptor",
		New:     flowtest.ErrorOf(grpcinterceptor.UnaryServerInterceptor),
		UserKey: grpcinterceptor.WithKeyFunc(core.ScopeUser, func(context.Context, string) (string, error) { return "u", nil }),
		Invalid: invalid,
	}
	t.Run("unary", func(t *testing.T) { flowtest.CheckConstructor(t, c) })
	c.New = flowtest.ErrorOf(func(l *core.Limiter, opts ...grpcinterceptor.Option) (grpc.StreamServerInterceptor, error) {
		return grpcinterceptor.StreamServerInterceptor(l, append(opts[:len(opts):len(opts)], grpcinterceptor.WithPerMessage(nil))...)
	})
	t.Run("stream", func(t *testing.T) { flowtest.CheckConstructor(t, c) })
}

// TestConstructorsAccept: this package's options, valid, build, with flow's,
// WithPerMessage on both constructors.
func TestConstructorsAccept(t *testing.T) {
	l := frozen(t, perUser)
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		t.Fatal(err)
	}
	valid := []grpcinterceptor.Option{
		grpcinterceptor.WithKeyFunc(core.ScopeUser, func(context.Context, string) (string, error) { return "u", nil }),
		flow.WithPlan(user), flow.WithCost(func(keyfuncs.Request) (int64, error) { return 1, nil }),
		flow.WithSkip(func(keyfuncs.Request) bool { return false }), flow.WithHeadersOnAllow(false),
		grpcinterceptor.WithDenyHandler(func(context.Context, *core.Decision) error { return nil }),
		grpcinterceptor.WithErrorHandler(func(context.Context, error) error { return nil }),
		grpcinterceptor.WithPerMessage(nil),
		grpcinterceptor.WithPlanFunc(func(context.Context, string) (string, error) { return "free", nil }),
		grpcinterceptor.WithCostFunc(func(context.Context, string) (int64, error) { return 1, nil }),
		grpcinterceptor.WithSkipFunc(func(context.Context, string) bool { return false }),
	}
	if _, err := grpcinterceptor.UnaryServerInterceptor(l, valid...); err != nil {
		t.Errorf("UnaryServerInterceptor with valid options: %v", err)
	}
	if _, err := grpcinterceptor.StreamServerInterceptor(l, valid...); err != nil {
		t.Errorf("StreamServerInterceptor with valid options: %v", err)
	}
}

// TestOptionsRefusedElsewhere: this package's options are refused by the
// constructor of another adapter (flow.New under that adapter's name, as
// nethttp.New calls it), not silently dropped.
func TestOptionsRefusedElsewhere(t *testing.T) {
	l := frozen(t, core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(1), 1)})
	for _, tc := range []struct {
		name string
		opt  grpcinterceptor.Option
		in   string
	}{
		{"WithKeyFunc", grpcinterceptor.WithKeyFunc(core.ScopeUser, func(context.Context, string) (string, error) { return "u", nil }), `grpcinterceptor.WithKeyFunc("user") is an option of grpcinterceptor, given to nethttp`},
		{"WithDenyHandler", grpcinterceptor.WithDenyHandler(func(context.Context, *core.Decision) error { return nil }), "grpcinterceptor.WithDenyHandler is an option of grpcinterceptor, given to nethttp"},
		{"WithErrorHandler", grpcinterceptor.WithErrorHandler(func(context.Context, error) error { return nil }), "grpcinterceptor.WithErrorHandler is an option of grpcinterceptor, given to nethttp"},
		{"WithPerMessage", grpcinterceptor.WithPerMessage(nil), "grpcinterceptor.WithPerMessage is an option of grpcinterceptor, given to nethttp"},
		{"WithPlanFunc", grpcinterceptor.WithPlanFunc(func(context.Context, string) (string, error) { return "free", nil }), "grpcinterceptor.WithPlanFunc is an option of grpcinterceptor, given to nethttp"},
		{"WithCostFunc", grpcinterceptor.WithCostFunc(func(context.Context, string) (int64, error) { return 1, nil }), "grpcinterceptor.WithCostFunc is an option of grpcinterceptor, given to nethttp"},
		{"WithSkipFunc", grpcinterceptor.WithSkipFunc(func(context.Context, string) bool { return false }), "grpcinterceptor.WithSkipFunc is an option of grpcinterceptor, given to nethttp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := flow.New(l, "nethttp", nil, tc.opt)
			if e != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Errorf("flow.New(nethttp, %s) = %v, %v; want ErrInvalidOption mentioning %q", tc.name, e != nil, err, tc.in)
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
	// per-ip, so that a call without a peer has no key for a tier.
	l := frozen(t, perUser, core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerSecond(1), 100)})
	user, _ := keyfuncs.Metadata("x-user")
	u, err := grpcinterceptor.UnaryServerInterceptor(l, flow.WithKey(core.ScopeUser, user))
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
