package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// GRPCHarness tells RunGRPCSuite how to build one gRPC adapter's
// interceptors. The suite owns everything else: the limiters (in-memory
// stores on a core.ManualClock where time need not pass), a test service on
// a real grpc-go server listening on 127.0.0.1:0, and a real grpc-go client.
type GRPCHarness struct {
	// Interceptors returns the unary and stream server interceptors of
	// limiter with the framework-neutral options opts, and the adapter's
	// defaults otherwise. It fails t (t.Fatal) if they cannot be built.
	// The suite may call it twice for one limiter and chains what it
	// returns, even with itself (DoubleInstall), so each call must build
	// new interceptors. Required.
	Interceptors func(t testing.TB, limiter *core.Limiter, opts []flow.Option) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor)
	// PacedStream returns the stream server interceptor of limiter with
	// opts and per-message pacing on, every received message costing 1
	// token. Required: DESIGN.md section 7 asks every gRPC adapter for it.
	PacedStream func(t testing.TB, limiter *core.Limiter, opts []flow.Option) grpc.StreamServerInterceptor
	// Native returns the adapter's own options that set the user scope's
	// key function, the plan, the cost and the skip functions to native
	// functions of the call's context and full method, each calling its
	// field of fns (grpcinterceptor: WithKeyFunc(core.ScopeUser, ...),
	// WithPlanFunc, WithCostFunc, WithSkipFunc). The NativeFuncs case
	// passes them to Interceptors after its framework-neutral options.
	// Required.
	Native func(t testing.TB, fns GRPCNativeFuncs) []flow.Option
}

// GRPCNativeFuncs are the functions of a call's context (as the
// interceptors before the rate limiter left it) and full method
// ("/package.Service/Method") that GRPCHarness.Native makes native options
// of. The suite sets every field.
type GRPCNativeFuncs struct {
	// User keys the user scope: the identity, or keyfuncs.ErrNotApplicable.
	User func(ctx context.Context, fullMethod string) (string, error)
	// Plan returns the caller's plan, or keyfuncs.ErrNotApplicable.
	Plan func(ctx context.Context, fullMethod string) (string, error)
	// Cost prices a call, or the opening of a stream, in tokens.
	Cost func(ctx context.Context, fullMethod string) (int64, error)
	// Skip exempts a call or a stream when it returns true.
	Skip func(ctx context.Context, fullMethod string) bool
}

// RunGRPCSuite runs the gRPC cases of DESIGN.md section 7 over the wire, each
// in its own subtest with its own limiter, server and client:
//
//   - UnaryAllowedHeaders: an allowed call carries the rate-limit fields in
//     its header metadata, not in its trailers.
//   - UnaryDenied: a denial is codes.ResourceExhausted with RetryInfo and
//     QuotaFailure details, grpc-retry-pushback-ms no earlier than the
//     refill, the rate-limit fields in the trailers and no header metadata
//     (Trailers-Only), and the handler does not run.
//   - MultiTier: the denial names the tier that denied.
//   - PerMethodTiers: a stricter tier limited to one method
//     (core.Rule.Routes with the full method) denies that method while
//     another passes, and a call it denies takes nothing from the per-user
//     tier (all or nothing).
//   - PerMethodKeys: flow.WithRouteKey keys the user tier of one method by
//     x-api-key, in place of x-user, which keys the other method.
//   - MethodKeys, MetadataKeys: keyfuncs.GRPCMethod and keyfuncs.Metadata
//     key the buckets.
//   - DoubleInstall: the same interceptors chained twice charge a call or a
//     stream once; two interceptors over one limiter fail it with
//     codes.Internal (flow.ErrInstalledTwice through the error path, its
//     text not shown to the client); over two limiters both apply.
//   - NativeFuncs: the adapter's native key, plan, cost and skip options
//     (GRPCHarness.Native) read the context an authentication interceptor
//     prepared, and the full method.
//   - StreamLimitedAtOpen: a stream is checked when it opens, and a denied
//     one ends before its handler runs.
//   - PerMessagePacing: with pacing on, messages beyond the burst are
//     delayed, not failed.
//   - StoreFailure: FailOpen lets calls through, FailClosed is
//     codes.Unavailable with a pushback.
//   - Concurrency: 64 concurrent calls on a burst of 10 get exactly 10 OKs.
//   - ClientRetry: a grpc-go client with a retry policy comes back after the
//     pushback and succeeds, and does not retry a cost that can never pass.
//   - BadInput, KeyFunctionError: codes.InvalidArgument and codes.Internal.
//   - Skip, HeadersOnAllowOff: the shared flow's options reach the wire.
//
// Only PerMessagePacing and ClientRetry wait on real time, about 300ms in
// all.
func RunGRPCSuite(t *testing.T, h GRPCHarness) {
	if h.Interceptors == nil {
		t.Fatal("conformance: GRPCHarness.Interceptors is nil")
	}
	if h.PacedStream == nil {
		t.Fatal("conformance: GRPCHarness.PacedStream is nil")
	}
	t.Run("UnaryAllowedHeaders", func(t *testing.T) { grpcTestAllowed(t, h) })
	t.Run("UnaryDenied", func(t *testing.T) { grpcTestDenied(t, h) })
	t.Run("MultiTier", func(t *testing.T) { grpcTestMultiTier(t, h) })
	t.Run("PerMethodTiers", func(t *testing.T) { grpcTestPerMethodTiers(t, h) })
	t.Run("PerMethodKeys", func(t *testing.T) { grpcTestPerMethodKeys(t, h) })
	t.Run("MethodKeys", func(t *testing.T) { grpcTestPerMethod(t, h) })
	t.Run("MetadataKeys", func(t *testing.T) { grpcTestMetadataKeys(t, h) })
	t.Run("StreamLimitedAtOpen", func(t *testing.T) { grpcTestStreamOpen(t, h) })
	t.Run("PerMessagePacing", func(t *testing.T) { grpcTestPacing(t, h) })
	t.Run("StoreFailure", func(t *testing.T) { grpcTestStoreFailure(t, h) })
	t.Run("Concurrency", func(t *testing.T) { grpcTestConcurrency(t, h) })
	t.Run("ClientRetry", func(t *testing.T) { grpcTestClientRetry(t, h) })
	t.Run("BadInput", func(t *testing.T) { grpcTestBadInput(t, h) })
	t.Run("KeyFunctionError", func(t *testing.T) { grpcTestKeyError(t, h) })
	t.Run("Skip", func(t *testing.T) { grpcTestSkip(t, h) })
	t.Run("HeadersOnAllowOff", func(t *testing.T) { grpcTestHeadersOnAllowOff(t, h) })
	t.Run("DoubleInstall", func(t *testing.T) { grpcTestDoubleInstall(t, h) })
	t.Run("NativeFuncs", func(t *testing.T) { grpcTestNativeFuncs(t, h) })
}

// The test service, registered by hand with a grpc.ServiceDesc: no
// generated code, only well-known message types.
const (
	grpcServiceName = "ratelimit.conformance.Echo"
	grpcUnary       = "/" + grpcServiceName + "/Unary"  // unary, echoes its StringValue
	grpcOther       = "/" + grpcServiceName + "/Other"  // the same, another method
	grpcStream      = "/" + grpcServiceName + "/Stream" // bidi, echoes every message
)

// grpcPushback is the trailer grpc-go's retry policy reads.
const grpcPushback = "grpc-retry-pushback-ms"

// grpcFieldNames are the rate-limit fields, as gRPC metadata spells them.
var grpcFieldNames = []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit"}

// grpcEcho is the service: it counts its handler runs.
type grpcEcho struct {
	unary, other, streams atomic.Int64
}

func grpcServiceDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: grpcServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Unary", Handler: grpcUnaryHandler(grpcUnary, func(e *grpcEcho) *atomic.Int64 { return &e.unary })},
			{MethodName: "Other", Handler: grpcUnaryHandler(grpcOther, func(e *grpcEcho) *atomic.Int64 { return &e.other })},
		},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Stream",
			Handler:       grpcStreamHandler,
			ServerStreams: true,
			ClientStreams: true,
		}},
	}
}

// grpcUnaryHandler is what protoc-gen-go-grpc would generate for a unary
// method taking and returning a StringValue.
func grpcUnaryHandler(method string, counter func(*grpcEcho) *atomic.Int64) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		echo := srv.(*grpcEcho)
		handler := func(ctx context.Context, req any) (any, error) {
			counter(echo).Add(1)
			return wrapperspb.String(req.(*wrapperspb.StringValue).GetValue()), nil
		}
		if interceptor == nil {
			return handler(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, handler)
	}
}

func grpcStreamHandler(srv any, stream grpc.ServerStream) error {
	srv.(*grpcEcho).streams.Add(1)
	for {
		in := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(in); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := stream.SendMsg(in); err != nil {
			return err
		}
	}
}

// grpcServer is one case's server and client.
type grpcServer struct {
	t    *testing.T
	echo *grpcEcho
	conn *grpc.ClientConn
}

// grpcStart serves the test service with the interceptors on 127.0.0.1:0
// and connects a client to it with dopts; both stop when t ends.
func grpcStart(t *testing.T, unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor, dopts ...grpc.DialOption) *grpcServer {
	t.Helper()
	var (
		unaries []grpc.UnaryServerInterceptor
		streams []grpc.StreamServerInterceptor
	)
	if unary != nil {
		unaries = append(unaries, unary)
	}
	if stream != nil {
		streams = append(streams, stream)
	}
	return grpcStartChain(t, unaries, streams, dopts...)
}

// grpcStartChain is grpcStart with chains of interceptors, run in order
// (grpc.ChainUnaryInterceptor, grpc.ChainStreamInterceptor).
func grpcStartChain(t *testing.T, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor, dopts ...grpc.DialOption) *grpcServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("conformance: cannot listen on 127.0.0.1:0 for the gRPC server: %v", err)
	}
	var sopts []grpc.ServerOption
	if len(unary) > 0 {
		sopts = append(sopts, grpc.ChainUnaryInterceptor(unary...))
	}
	if len(stream) > 0 {
		sopts = append(sopts, grpc.ChainStreamInterceptor(stream...))
	}
	srv := grpc.NewServer(sopts...)
	echo := &grpcEcho{}
	srv.RegisterService(grpcServiceDesc(), echo)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	// passthrough: the address as it is, no resolver and no service config
	// but the default one the case passes.
	dopts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dopts...)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), dopts...)
	if err != nil {
		srv.Stop()
		t.Fatalf("conformance: grpc.NewClient(%s): %v", lis.Addr(), err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("conformance: gRPC server: Serve: %v", err)
		}
	})
	return &grpcServer{t: t, echo: echo, conn: conn}
}

// grpcStartWith starts a server with h's interceptors for limiter and opts.
func grpcStartWith(t *testing.T, h GRPCHarness, l *core.Limiter, opts []flow.Option, dopts ...grpc.DialOption) *grpcServer {
	t.Helper()
	unary, stream := grpcInterceptors(t, h, l, opts)
	return grpcStart(t, unary, stream, dopts...)
}

// grpcInterceptors returns h's interceptors for limiter and opts, failing
// t if one is nil.
func grpcInterceptors(t *testing.T, h GRPCHarness, l *core.Limiter, opts []flow.Option) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	t.Helper()
	unary, stream := h.Interceptors(t, l, opts)
	if unary == nil || stream == nil {
		t.Fatal("conformance: GRPCHarness.Interceptors returned a nil interceptor")
	}
	return unary, stream
}

// grpcReply is what the client saw of one unary call.
type grpcReply struct {
	value   string
	header  metadata.MD
	trailer metadata.MD
	err     error
	elapsed time.Duration
}

func (r grpcReply) code() codes.Code { return status.Code(r.err) }

// call invokes method with the metadata kv (key, value, key, value...).
func (s *grpcServer) call(method string, kv ...string) grpcReply {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...))
	}
	var r grpcReply
	out := new(wrapperspb.StringValue)
	start := time.Now()
	r.err = s.conn.Invoke(ctx, method, wrapperspb.String("ping"), out, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	r.elapsed = time.Since(start)
	if r.err == nil {
		r.value = out.GetValue()
	}
	return r
}

// grpcCall names a call in failure messages: "Unary(x-user=alice)".
func grpcCall(method string, kv ...string) string {
	var b strings.Builder
	b.WriteString(method[strings.LastIndexByte(method, '/')+1:])
	b.WriteByte('(')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(", ")
		}
		v := kv[i+1]
		if len(v) > 16 {
			v = v[:16] + "..."
		}
		fmt.Fprintf(&b, "%s=%s", kv[i], v)
	}
	b.WriteByte(')')
	return b.String()
}

// grpcLimiter returns a limiter for rules on a memory store whose clock
// stands still at t0 (from store.go), with the extra limiter options.
func grpcLimiter(t testing.TB, opts []core.Option, rules ...core.Rule) *core.Limiter {
	t.Helper()
	s, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(t0)))
	if err != nil {
		t.Fatalf("conformance: NewMemoryStore: %v", err)
	}
	return grpcLimiterOn(t, append([]core.Option{core.WithStore(s)}, opts...), rules...)
}

// grpcLimiterOn returns a limiter for rules with opts as they are: without
// a store option, a memory store on the real clock.
func grpcLimiterOn(t testing.TB, opts []core.Option, rules ...core.Rule) *core.Limiter {
	t.Helper()
	return grpcPlanLimiter(t, core.Plans{}, opts, rules...)
}

// grpcPlanLimiter is grpcLimiterOn with plans.
func grpcPlanLimiter(t testing.TB, plans core.Plans, opts []core.Option, rules ...core.Rule) *core.Limiter {
	t.Helper()
	p, err := core.NewPlanPolicy(plans, rules...)
	if err != nil {
		t.Fatalf("conformance: NewPolicy: %v", err)
	}
	l, err := core.NewLimiter(p, opts...)
	if err != nil {
		t.Fatalf("conformance: NewLimiter: %v", err)
	}
	return l
}

// grpcUserKey keys the user scope by the x-user metadata.
func grpcUserKey(t testing.TB) flow.Option {
	t.Helper()
	user, err := keyfuncs.Metadata("x-user")
	if err != nil {
		t.Fatalf("conformance: keyfuncs.Metadata: %v", err)
	}
	return flow.WithKey(core.ScopeUser, user)
}

// grpcFields returns the rate-limit fields of md, and the pushback.
func grpcFields(md metadata.MD) map[string]string {
	out := map[string]string{}
	for _, name := range append(slices.Clone(grpcFieldNames), grpcPushback) {
		if vs := md.Get(name); len(vs) > 0 {
			out[name] = strings.Join(vs, " | ")
		}
	}
	return out
}

// grpcExpectFields checks that md holds exactly the fields in want.
func grpcExpectFields(t testing.TB, what, which string, md metadata.MD, want map[string]string) {
	t.Helper()
	if got := grpcFields(md); !maps.Equal(got, want) {
		t.Errorf("%s: rate-limit fields in the %s = %v, want %v", what, which, got, want)
	}
}

// grpcExpectCode checks the status code of a reply.
func grpcExpectCode(t testing.TB, what string, r grpcReply, want codes.Code) bool {
	t.Helper()
	if got := r.code(); got != want {
		t.Errorf("%s = %v (%v), want %v", what, got, r.err, want)
		return false
	}
	return true
}

// grpcUnix is the X-RateLimit-Reset of a bucket full again at t0+d.
func grpcUnix(d time.Duration) string {
	at := t0.Add(d)
	s := at.Unix()
	if at.Nanosecond() != 0 {
		s++
	}
	return strconv.FormatInt(s, 10)
}

// grpcDetails decodes the status details of err, as a client does.
func grpcDetails(err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure, []string) {
	var (
		ri    *errdetails.RetryInfo
		qf    *errdetails.QuotaFailure
		other []string
	)
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		default:
			other = append(other, fmt.Sprintf("%T", d))
		}
	}
	return ri, qf, other
}

// grpcSubjects lists the subjects of a QuotaFailure's violations.
func grpcSubjects(qf *errdetails.QuotaFailure) []string {
	var out []string
	for _, v := range qf.GetViolations() {
		out = append(out, v.GetSubject())
	}
	return out
}

// grpcExpectDenial checks a rate-limit denial: ResourceExhausted;
// RetryInfo with a delay of refill rounded up to the millisecond, and a
// grpc-retry-pushback-ms of the same; a QuotaFailure whose violations name
// the denying tiers; no header metadata at all (Trailers-Only); and the
// rate-limit fields in the trailers as want says (want holds no pushback).
func grpcExpectDenial(t testing.TB, what string, r grpcReply, refill time.Duration, tiers []string, want map[string]string) {
	t.Helper()
	if !grpcExpectCode(t, what, r, codes.ResourceExhausted) {
		return
	}
	ms := (refill + time.Millisecond - 1) / time.Millisecond
	ri, qf, other := grpcDetails(r.err)
	if ri == nil {
		t.Errorf("%s: no google.rpc.RetryInfo in the status details (have QuotaFailure: %v, others: %v)", what, qf != nil, other)
	} else if got := ri.GetRetryDelay().AsDuration(); got < refill || got != ms*time.Millisecond {
		t.Errorf("%s: RetryInfo.retry_delay = %v, want %v (the refill, %v, rounded up to the millisecond)", what, got, ms*time.Millisecond, refill)
	}
	if got := grpcSubjects(qf); !slices.Equal(got, tiers) {
		t.Errorf("%s: QuotaFailure violation subjects = %q, want the denying tiers %q", what, got, tiers)
	}
	if len(r.header) != 0 {
		t.Errorf("%s: header metadata %v, want none: a denial must be Trailers-Only", what, r.header)
	}
	pb := r.trailer.Get(grpcPushback)
	if len(pb) != 1 {
		t.Errorf("%s: %s trailer = %q, want one value", what, grpcPushback, pb)
	} else if n, err := strconv.ParseInt(pb[0], 10, 64); err != nil || time.Duration(n)*time.Millisecond < refill || n != int64(ms) {
		t.Errorf("%s: %s = %q, want %d: the refill, %v, rounded up to the millisecond, never earlier", what, grpcPushback, pb[0], ms, refill)
	}
	want = maps.Clone(want)
	want[grpcPushback] = strconv.FormatInt(int64(ms), 10)
	grpcExpectFields(t, what, "trailers", r.trailer, want)
}

// grpcTestAllowed: an allowed call carries the rate-limit fields, with
// lower-case names, in its header metadata and runs its handler.
func grpcTestAllowed(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 3)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
	what := grpcCall(grpcUnary, "x-user", "alice")
	r := s.call(grpcUnary, "x-user", "alice")
	if !grpcExpectCode(t, what, r, codes.OK) {
		return
	}
	if r.value != "ping" {
		t.Errorf("%s: reply %q, want the echo %q", what, r.value, "ping")
	}
	// Burst 3 at 1/s: 2 left, full again in 1s.
	grpcExpectFields(t, what, "header metadata", r.header, map[string]string{
		"x-ratelimit-limit":     "3",
		"x-ratelimit-remaining": "2",
		"x-ratelimit-reset":     grpcUnix(time.Second),
		"ratelimit-policy":      `"per-user";q=3;w=3`,
		"ratelimit":             `"per-user";r=2;t=1`,
	})
	grpcExpectFields(t, what, "trailers", r.trailer, map[string]string{})
	if n := s.echo.unary.Load(); n != 1 {
		t.Errorf("%s: handler ran %d times, want 1", what, n)
	}
}

// grpcTestDenied: the third call on a burst of 2 is denied as DESIGN.md
// section 7 says, and its handler does not run.
func grpcTestDenied(t *testing.T, h GRPCHarness) {
	// 3 tokens per second: the next token comes 1s/3 = 333.33...ms after
	// the bucket empties (core rounds its interval up to 333333334ns), a
	// pushback of 334ms.
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(3), 2)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
	for i := range 2 {
		what := fmt.Sprintf("%s #%d", grpcCall(grpcUnary, "x-user", "alice"), i+1)
		grpcExpectCode(t, what, s.call(grpcUnary, "x-user", "alice"), codes.OK)
	}
	what := grpcCall(grpcUnary, "x-user", "alice") + " #3"
	r := s.call(grpcUnary, "x-user", "alice")
	grpcExpectDenial(t, what, r, time.Second/3+1, []string{"per-user"}, map[string]string{
		"x-ratelimit-limit":     "2",
		"x-ratelimit-remaining": "0",
		"x-ratelimit-reset":     grpcUnix(2 * (time.Second/3 + 1)),
		"ratelimit-policy":      `"per-user";q=2;w=1`,
		"ratelimit":             `"per-user";r=0;t=1`,
	})
	if msg := status.Convert(r.err).Message(); !strings.Contains(msg, "per-user") {
		t.Errorf("%s: status message %q does not name the tier", what, msg)
	}
	if n := s.echo.unary.Load(); n != 2 {
		t.Errorf("handler ran %d times for 2 allowed calls and 1 denied, want 2", n)
	}
}

// grpcTestMultiTier: with a per-user and a per-method tier, each denial
// names the tier that denied, and a denied call takes nothing from the
// other tier.
func grpcTestMultiTier(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil,
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 2)},
		core.Rule{Name: "per-method", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(1), 3)},
	)
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t), flow.WithKey(core.ScopeEndpoint, keyfuncs.GRPCMethod())})
	policy := `"per-user";q=2;w=2, "per-method";q=3;w=3`
	for i := range 2 {
		what := fmt.Sprintf("%s #%d", grpcCall(grpcUnary, "x-user", "alice"), i+1)
		grpcExpectCode(t, what, s.call(grpcUnary, "x-user", "alice"), codes.OK)
	}
	// alice's tier is empty, the method's has 1 left.
	what := grpcCall(grpcUnary, "x-user", "alice") + " #3"
	grpcExpectDenial(t, what, s.call(grpcUnary, "x-user", "alice"), time.Second, []string{"per-user"}, map[string]string{
		"x-ratelimit-limit":     "2",
		"x-ratelimit-remaining": "0",
		"x-ratelimit-reset":     grpcUnix(2 * time.Second),
		"ratelimit-policy":      policy,
		"ratelimit":             `"per-user";r=0;t=1`,
	})
	// bob takes the method's last token (the denial took none of it)...
	what = grpcCall(grpcUnary, "x-user", "bob")
	grpcExpectCode(t, what, s.call(grpcUnary, "x-user", "bob"), codes.OK)
	// ... and is then denied by the method's tier with a token of his own.
	what += " #2"
	r := s.call(grpcUnary, "x-user", "bob")
	grpcExpectDenial(t, what, r, time.Second, []string{"per-method"}, map[string]string{
		"x-ratelimit-limit":     "3",
		"x-ratelimit-remaining": "0",
		"x-ratelimit-reset":     grpcUnix(3 * time.Second),
		"ratelimit-policy":      policy,
		"ratelimit":             `"per-method";r=0;t=1`,
	})
	if msg := status.Convert(r.err).Message(); !strings.Contains(msg, "per-method") {
		t.Errorf("%s: status message %q does not name the denying tier per-method", what, msg)
	}
	if n := s.echo.unary.Load(); n != 3 {
		t.Errorf("handler ran %d times for 3 allowed calls, want 3", n)
	}
}

// grpcTestPerMethod: keyfuncs.GRPCMethod gives each method its own bucket.
func grpcTestPerMethod(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil, core.Rule{Name: "per-method", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	s := grpcStartWith(t, h, l, []flow.Option{flow.WithKey(core.ScopeEndpoint, keyfuncs.GRPCMethod())})
	for _, step := range []struct {
		method string
		want   codes.Code
	}{
		{grpcUnary, codes.OK},
		{grpcUnary, codes.ResourceExhausted},
		{grpcOther, codes.OK},
		{grpcOther, codes.ResourceExhausted},
	} {
		grpcExpectCode(t, grpcCall(step.method), s.call(step.method), step.want)
	}
	if u, o := s.echo.unary.Load(), s.echo.other.Load(); u != 1 || o != 1 {
		t.Errorf("handlers ran Unary %d and Other %d times, want 1 each", u, o)
	}
}

// grpcTestMetadataKeys: keyfuncs.Metadata("x-user") keys one bucket per
// user, and a call without the key skips the tier.
func grpcTestMetadataKeys(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
	for _, step := range []struct {
		kv   []string
		want codes.Code
	}{
		{[]string{"x-user", "alice"}, codes.OK},
		{[]string{"x-user", "alice"}, codes.ResourceExhausted},
		{[]string{"x-user", "bob"}, codes.OK},
		{[]string{"x-user", "bob"}, codes.ResourceExhausted},
		{[]string{"x-other", "alice"}, codes.OK},
		{nil, codes.OK},
		{nil, codes.OK},
	} {
		what := grpcCall(grpcUnary, step.kv...)
		r := s.call(grpcUnary, step.kv...)
		if grpcExpectCode(t, what, r, step.want) && (len(step.kv) == 0 || step.kv[0] != "x-user") {
			// No rule applies: no quota to describe.
			grpcExpectFields(t, what, "header metadata", r.header, map[string]string{})
		}
	}
}

// grpcStreamReply is what the client saw of one stream.
type grpcStreamReply struct {
	echoes  []string
	header  metadata.MD
	trailer metadata.MD
	err     error // the status at the end of the stream; nil for OK
}

// stream opens a bidi stream with the metadata kv, sends msgs, closes its
// side and reads to the end.
func (s *grpcServer) stream(msgs []string, kv ...string) grpcStreamReply {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if len(kv) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...))
	}
	var r grpcStreamReply
	cs, err := s.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, grpcStream)
	if err != nil {
		r.err = err
		return r
	}
	for _, m := range msgs {
		// A stream the server ended makes Send return io.EOF; the status
		// comes from Recv.
		if err := cs.SendMsg(wrapperspb.String(m)); err != nil {
			break
		}
	}
	_ = cs.CloseSend()
	for {
		in := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(in); err != nil {
			if err != io.EOF {
				r.err = err
			}
			break
		}
		r.echoes = append(r.echoes, in.GetValue())
	}
	// Header does not block once the stream has ended; it is empty for a
	// Trailers-Only response.
	r.header, _ = cs.Header()
	r.trailer = cs.Trailer()
	return r
}

// grpcTestStreamOpen: the first stream is allowed and carries the fields in
// its header metadata; the second is denied when it opens, Trailers-Only,
// and its handler never runs.
func grpcTestStreamOpen(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
	msgs := []string{"a", "b", "c"}
	r := s.stream(msgs, "x-user", "alice")
	if r.err != nil || !slices.Equal(r.echoes, msgs) {
		t.Fatalf("Stream(x-user=alice) #1: echoes %q, status %v; want %q and OK: an open stream is not limited per message", r.echoes, r.err, msgs)
	}
	grpcExpectFields(t, "Stream(x-user=alice) #1", "header metadata", r.header, map[string]string{
		"x-ratelimit-limit":     "1",
		"x-ratelimit-remaining": "0",
		"x-ratelimit-reset":     grpcUnix(time.Second),
		"ratelimit-policy":      `"per-user";q=1;w=1`,
		"ratelimit":             `"per-user";r=0;t=1`,
	})
	r = s.stream(msgs, "x-user", "alice")
	reply := grpcReply{header: r.header, trailer: r.trailer, err: r.err}
	grpcExpectDenial(t, "Stream(x-user=alice) #2", reply, time.Second, []string{"per-user"}, map[string]string{
		"x-ratelimit-limit":     "1",
		"x-ratelimit-remaining": "0",
		"x-ratelimit-reset":     grpcUnix(time.Second),
		"ratelimit-policy":      `"per-user";q=1;w=1`,
		"ratelimit":             `"per-user";r=0;t=1`,
	})
	if len(r.echoes) != 0 {
		t.Errorf("Stream(x-user=alice) #2: echoes %q from a denied stream", r.echoes)
	}
	if n := s.echo.streams.Load(); n != 1 {
		t.Errorf("stream handler ran %d times for 1 allowed and 1 denied stream, want 1", n)
	}
}

// grpcTestPacing: with per-message pacing, a stream sending more messages
// than the burst is slowed to the rate, not failed. It waits on real time:
// at 50 tokens/s with a burst of 2, the open and the first message take the
// burst, and the 5 messages after them wait 20ms each, 100ms in all.
func grpcTestPacing(t *testing.T, h GRPCHarness) {
	l := grpcLimiterOn(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(50), 2)})
	stream := h.PacedStream(t, l, []flow.Option{grpcUserKey(t)})
	if stream == nil {
		t.Fatal("conformance: GRPCHarness.PacedStream returned a nil interceptor")
	}
	s := grpcStart(t, nil, stream)
	msgs := []string{"m1", "m2", "m3", "m4", "m5", "m6"}
	const want = 5 * 20 * time.Millisecond
	start := time.Now()
	r := s.stream(msgs, "x-user", "alice")
	elapsed := time.Since(start)
	if r.err != nil || !slices.Equal(r.echoes, msgs) {
		t.Fatalf("paced Stream(x-user=alice) with %d messages: echoes %q, status %v; want every message echoed in order and OK", len(msgs), r.echoes, r.err)
	}
	if elapsed < want {
		t.Errorf("paced Stream(x-user=alice) with %d messages took %v, want at least %v: messages beyond the burst must wait for their tokens", len(msgs), elapsed, want)
	}
	t.Logf("%d messages at 50/s with a burst of 2 took %v (at least %v)", len(msgs), elapsed, want)
}

// grpcDownStore is a store that always fails: a fault no real server
// produces on demand.
type grpcDownStore struct{}

func (grpcDownStore) Take(context.Context, *core.Take) error {
	return errors.New("conformance: store down")
}

// grpcTestStoreFailure: a failing store lets calls through under FailOpen
// and denies them with codes.Unavailable under FailClosed.
func grpcTestStoreFailure(t *testing.T, h GRPCHarness) {
	rule := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)}
	t.Run("FailOpen", func(t *testing.T) {
		l := grpcLimiterOn(t, []core.Option{core.WithStore(grpcDownStore{}), core.WithFailureMode(core.FailOpen)}, rule)
		s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
		for i := range 2 {
			what := fmt.Sprintf("%s #%d under FailOpen", grpcCall(grpcUnary, "x-user", "alice"), i+1)
			grpcExpectCode(t, what, s.call(grpcUnary, "x-user", "alice"), codes.OK)
		}
		if n := s.echo.unary.Load(); n != 2 {
			t.Errorf("handler ran %d times, want 2", n)
		}
	})
	t.Run("FailClosed", func(t *testing.T) {
		l := grpcLimiterOn(t, []core.Option{core.WithStore(grpcDownStore{}), core.WithFailureMode(core.FailClosed)}, rule)
		s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
		what := grpcCall(grpcUnary, "x-user", "alice") + " under FailClosed"
		r := s.call(grpcUnary, "x-user", "alice")
		if grpcExpectCode(t, what, r, codes.Unavailable) {
			// core fails closed with a RetryAfter of 1s.
			if ri, _, _ := grpcDetails(r.err); ri == nil || ri.GetRetryDelay().AsDuration() != time.Second {
				t.Errorf("%s: RetryInfo = %v, want a retry delay of 1s", what, ri)
			}
			grpcExpectFields(t, what, "trailers", r.trailer, map[string]string{grpcPushback: "1000"})
			if len(r.header) != 0 {
				t.Errorf("%s: header metadata %v, want none (Trailers-Only)", what, r.header)
			}
		}
		if n := s.echo.unary.Load(); n != 0 {
			t.Errorf("handler ran %d times, want 0", n)
		}
	})
}

// grpcTestConcurrency: 64 concurrent calls on one bucket with a burst of
// 10, the clock frozen, get exactly 10 OKs and 54 ResourceExhausted.
func grpcTestConcurrency(t *testing.T, h GRPCHarness) {
	const calls, burst = 64, 10
	l := grpcLimiter(t, nil, core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerHour(1), burst)})
	s := grpcStartWith(t, h, l, nil)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		got   = map[codes.Code]int{}
		start = make(chan struct{})
	)
	for range calls {
		wg.Go(func() {
			<-start
			c := s.call(grpcUnary).code()
			mu.Lock()
			got[c]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if want := map[codes.Code]int{codes.OK: burst, codes.ResourceExhausted: calls - burst}; !maps.Equal(got, want) {
		t.Errorf("%d concurrent %s on a burst of %d: status codes %v, want %v", calls, grpcCall(grpcUnary), burst, got, want)
	}
	if n := s.echo.unary.Load(); n != burst {
		t.Errorf("handler ran %d times, want exactly %d", n, burst)
	}
}

// grpcRetryConfig is a service config whose retry policy retries
// RESOURCE_EXHAUSTED up to 3 attempts, with a backoff of about 1ms: a client
// that ignored the pushback would spend its attempts long before a bucket
// refilling in 200ms has a token.
const grpcRetryConfig = `{"methodConfig": [{
	"name": [{"service": "` + grpcServiceName + `"}],
	"retryPolicy": {
		"maxAttempts": 3,
		"initialBackoff": "0.001s",
		"maxBackoff": "0.001s",
		"backoffMultiplier": 1,
		"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
	}
}]}`

// grpcTestClientRetry: a real grpc-go client with a retry policy retries a
// denial after the pushback, and succeeds; it does not retry a cost above
// the burst.
//
// grpc-go reads the pushback in csAttempt.shouldRetry (stream.go, v1.85.0):
// it retries an attempt only if the response was Trailers-Only
// ("if !a.transportStream.TrailersOnly() { return false, err }"), then takes
// a single grpc-retry-pushback-ms value from the trailer as the wait instead
// of its backoff ("dur = time.Millisecond * time.Duration(pushback)"), and
// gives up at once on a negative or unparseable one, as gRFC A6 specifies.
// It does not read google.rpc.RetryInfo.
func grpcTestClientRetry(t *testing.T, h GRPCHarness) {
	var (
		mu        sync.Mutex
		decisions int
		retry     []time.Duration // the RetryAfter of each denial
	)
	observe := core.WithObserver(func(_ context.Context, e *core.Event) {
		mu.Lock()
		defer mu.Unlock()
		decisions++
		if !e.Decision.Allowed {
			retry = append(retry, e.Decision.RetryAfter)
		}
	})
	seen := func() (int, []time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		return decisions, slices.Clone(retry)
	}
	cost := flow.WithCost(func(r keyfuncs.Request) (int64, error) {
		if vs := r.Values("x-cost"); len(vs) > 0 {
			return strconv.ParseInt(vs[0], 10, 64)
		}
		return 1, nil
	})
	// The real clock: the client must really wait.
	l := grpcLimiterOn(t, []core.Option{observe}, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.Every(200*time.Millisecond), 1)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t), cost}, grpc.WithDefaultServiceConfig(grpcRetryConfig))

	t.Run("RetriesAfterPushback", func(t *testing.T) {
		// The second call must come within 200ms of the first to be denied;
		// a machine too slow for that gets two more tries, each with a
		// bucket of its own.
		for try := 1; ; try++ {
			user := fmt.Sprintf("alice-%d", try)
			what := grpcCall(grpcUnary, "x-user", user)
			before, _ := seen()
			runs := s.echo.unary.Load()
			grpcExpectCode(t, what+" #1", s.call(grpcUnary, "x-user", user), codes.OK)
			r := s.call(grpcUnary, "x-user", user)
			grpcExpectCode(t, what+" #2, retried by the client", r, codes.OK)
			after, retries := seen()
			if after-before == 2 && len(retries) == 0 {
				if try < 3 {
					continue // the refill came before the second call
				}
				t.Fatalf("%s: no call was denied in 3 tries: the machine is too slow to call twice within 200ms", what)
			}
			if after-before != 3 || len(retries) != 1 {
				t.Fatalf("the limiter decided %d times with %d denials, want 3 decisions (allowed, denied, allowed on the retry) and 1 denial", after-before, len(retries))
			}
			if n := s.echo.unary.Load() - runs; n != 2 {
				t.Errorf("handler ran %d times, want 2: the first call and the retry", n)
			}
			// The client waited the pushback, the RetryAfter rounded up to
			// the millisecond, before its retry.
			pushback := (retries[0] + time.Millisecond - 1) / time.Millisecond * time.Millisecond
			if r.elapsed < pushback {
				t.Errorf("%s #2 took %v, want at least the pushback of %v", what, r.elapsed, pushback)
			}
			t.Logf("denied with a RetryAfter of %v; the retried call took %v", retries[0], r.elapsed)
			return
		}
	})
	t.Run("NoRetryForCostAboveBurst", func(t *testing.T) {
		before, _ := seen()
		kv := []string{"x-user", "bob", "x-cost", "2"}
		what := grpcCall(grpcUnary, kv...)
		r := s.call(grpcUnary, kv...)
		if !grpcExpectCode(t, what, r, codes.ResourceExhausted) {
			return
		}
		if after, _ := seen(); after != before+1 {
			t.Errorf("%s: the limiter decided %d times, want 1: a cost no wait can cure must not be retried", what, after-before)
		}
		ri, qf, _ := grpcDetails(r.err)
		if ri != nil {
			t.Errorf("%s: RetryInfo %v, want none: no wait lets a cost above the burst pass", what, ri)
		}
		if got := grpcSubjects(qf); !slices.Equal(got, []string{"per-user"}) {
			t.Errorf("%s: QuotaFailure violation subjects = %q, want [per-user]", what, got)
		}
		if pb := r.trailer.Get(grpcPushback); !slices.Equal(pb, []string{"-1"}) {
			t.Errorf("%s: %s = %q, want -1 (do not retry, gRFC A6)", what, grpcPushback, pb)
		}
		if len(r.header) != 0 {
			t.Errorf("%s: header metadata %v, want none (Trailers-Only)", what, r.header)
		}
	})
}

// grpcTestBadInput: a key the client made too long for a bucket is
// codes.InvalidArgument, and the handler does not run.
func grpcTestBadInput(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
	long := strings.Repeat("u", core.MaxKeyLen+1)
	r := s.call(grpcUnary, "x-user", long)
	grpcExpectCode(t, grpcCall(grpcUnary, "x-user", long), r, codes.InvalidArgument)
	if n := s.echo.unary.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
}

// grpcTestKeyError: a key function that fails is codes.Internal, and the
// handler does not run.
func grpcTestKeyError(t *testing.T, h GRPCHarness) {
	tenant := core.Dimension("tenant")
	l := grpcLimiter(t, nil, core.Rule{Name: "per-tenant", Scope: tenant, Limit: core.TokenBucket(core.PerSecond(1), 10)})
	failing := flow.WithKey(tenant, func(keyfuncs.Request) (string, error) {
		return "", errors.New("conformance: tenant directory unreachable")
	})
	s := grpcStartWith(t, h, l, []flow.Option{failing})
	grpcExpectCode(t, grpcCall(grpcUnary)+" with a failing key function", s.call(grpcUnary), codes.Internal)
	if n := s.echo.unary.Load(); n != 0 {
		t.Errorf("handler ran %d times, want 0", n)
	}
}

// grpcTestSkip: a call that flow.WithSkip exempts gets no decision and
// no fields, and takes no token.
func grpcTestSkip(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)})
	skip := flow.WithSkip(func(r keyfuncs.Request) bool { return len(r.Values("x-internal")) > 0 })
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t), skip})
	internal := []string{"x-user", "alice", "x-internal", "1"}
	for i := range 3 {
		what := fmt.Sprintf("%s #%d", grpcCall(grpcUnary, internal...), i+1)
		r := s.call(grpcUnary, internal...)
		if grpcExpectCode(t, what, r, codes.OK) {
			grpcExpectFields(t, what, "header metadata", r.header, map[string]string{})
		}
	}
	what := grpcCall(grpcUnary, "x-user", "alice")
	grpcExpectCode(t, what+" #1 after 3 skipped", s.call(grpcUnary, "x-user", "alice"), codes.OK)
	grpcExpectCode(t, what+" #2 after 3 skipped", s.call(grpcUnary, "x-user", "alice"), codes.ResourceExhausted)
}

// grpcTestHeadersOnAllowOff: flow.WithHeadersOnAllow(false) leaves the
// fields out of allowed calls, and a denial still carries them.
func grpcTestHeadersOnAllowOff(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 1)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t), flow.WithHeadersOnAllow(false)})
	what := grpcCall(grpcUnary, "x-user", "alice")
	r := s.call(grpcUnary, "x-user", "alice")
	if grpcExpectCode(t, what+" #1", r, codes.OK) {
		grpcExpectFields(t, what+" #1", "header metadata", r.header, map[string]string{})
	}
	grpcExpectDenial(t, what+" #2", s.call(grpcUnary, "x-user", "alice"), time.Second, []string{"per-user"}, map[string]string{
		"x-ratelimit-limit":     "1",
		"x-ratelimit-remaining": "0",
		"x-ratelimit-reset":     grpcUnix(time.Second),
		"ratelimit-policy":      `"per-user";q=1;w=1`,
		"ratelimit":             `"per-user";r=0;t=1`,
	})
}

// grpcTestPerMethodTiers: a per-user tier for every method and a stricter
// one limited to Unary (core.Rule.Routes with its full method), decided
// together: Unary is denied by the stricter tier while Other still
// passes, and the denied calls take nothing from the per-user tier.
func grpcTestPerMethodTiers(t *testing.T, h GRPCHarness) {
	l := grpcLimiter(t, nil,
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(4), 4)},
		core.Rule{Name: "unary-strict", Scope: core.ScopeUser, Routes: []string{grpcUnary}, Limit: core.TokenBucket(core.PerHour(1), 1)},
	)
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t)})
	both := `"per-user";q=4;w=3600, "unary-strict";q=1;w=3600`
	alice := []string{"x-user", "alice"}

	// Unary takes a token from both tiers; the stricter one decides the
	// fields, having the least left.
	what := grpcCall(grpcUnary, alice...) + " #1"
	r := s.call(grpcUnary, alice...)
	if grpcExpectCode(t, what, r, codes.OK) {
		grpcExpectFields(t, what, "header metadata", r.header, map[string]string{
			"x-ratelimit-limit":     "1",
			"x-ratelimit-remaining": "0",
			"x-ratelimit-reset":     grpcUnix(time.Hour),
			"ratelimit-policy":      both,
			"ratelimit":             `"unary-strict";r=0;t=3600`,
		})
	}
	for i := 2; i <= 4; i++ {
		what := fmt.Sprintf("%s #%d", grpcCall(grpcUnary, alice...), i)
		grpcExpectDenial(t, what, s.call(grpcUnary, alice...), time.Hour, []string{"unary-strict"}, map[string]string{
			"x-ratelimit-limit":     "1",
			"x-ratelimit-remaining": "0",
			"x-ratelimit-reset":     grpcUnix(time.Hour),
			"ratelimit-policy":      both,
			"ratelimit":             `"unary-strict";r=0;t=3600`,
		})
	}
	// Other is not limited by the stricter tier, and finds 3 of alice's 4
	// per-user tokens: the 3 denied calls took none.
	for left := 2; left >= 0; left-- {
		what := fmt.Sprintf("%s with %d per-user tokens left after it", grpcCall(grpcOther, alice...), left)
		r := s.call(grpcOther, alice...)
		if !grpcExpectCode(t, what, r, codes.OK) {
			continue
		}
		// 4 per hour: a token every 15 minutes.
		refill := time.Duration(4-left) * 15 * time.Minute
		grpcExpectFields(t, what, "header metadata", r.header, map[string]string{
			"x-ratelimit-limit":     "4",
			"x-ratelimit-remaining": strconv.Itoa(left),
			"x-ratelimit-reset":     grpcUnix(refill),
			"ratelimit-policy":      `"per-user";q=4;w=3600`,
			"ratelimit":             fmt.Sprintf(`"per-user";r=%d;t=%d`, left, int(refill/time.Second)),
		})
	}
	what = grpcCall(grpcOther, alice...) + " with the per-user tier empty"
	grpcExpectDenial(t, what, s.call(grpcOther, alice...), 15*time.Minute, []string{"per-user"}, map[string]string{
		"x-ratelimit-limit":     "4",
		"x-ratelimit-remaining": "0",
		"x-ratelimit-reset":     grpcUnix(time.Hour),
		"ratelimit-policy":      `"per-user";q=4;w=3600`,
		"ratelimit":             `"per-user";r=0;t=900`,
	})
	// The stricter tier is per user: bob has his own.
	grpcExpectCode(t, grpcCall(grpcUnary, "x-user", "bob"), s.call(grpcUnary, "x-user", "bob"), codes.OK)
	if u, o := s.echo.unary.Load(), s.echo.other.Load(); u != 2 || o != 3 {
		t.Errorf("handlers ran Unary %d and Other %d times, want 2 and 3", u, o)
	}
}

// grpcTestPerMethodKeys: flow.WithRouteKey keys the user tier of Unary by
// the x-api-key metadata, in place of x-user, which keys it on Other; a
// Unary call without an API key has no identity for the tier, which then
// does not apply (x-user is not tried instead).
func grpcTestPerMethodKeys(t *testing.T, h GRPCHarness) {
	apiKey, err := keyfuncs.Metadata("x-api-key")
	if err != nil {
		t.Fatalf("conformance: keyfuncs.Metadata: %v", err)
	}
	l := grpcLimiter(t, nil, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)})
	s := grpcStartWith(t, h, l, []flow.Option{grpcUserKey(t), flow.WithRouteKey(grpcUnary, core.ScopeUser, apiKey)})
	for _, step := range []struct {
		method string
		kv     []string
		want   codes.Code
		fields bool // the call is limited: it carries the fields
	}{
		{grpcUnary, []string{"x-api-key", "k1", "x-user", "alice"}, codes.OK, true},
		{grpcUnary, []string{"x-api-key", "k1", "x-user", "bob"}, codes.ResourceExhausted, true}, // k1's bucket, whoever the user
		{grpcUnary, []string{"x-api-key", "k2", "x-user", "alice"}, codes.OK, true},
		{grpcOther, []string{"x-api-key", "k1", "x-user", "alice"}, codes.OK, true}, // alice's bucket, not k1's
		{grpcOther, []string{"x-api-key", "k3", "x-user", "alice"}, codes.ResourceExhausted, true},
		{grpcOther, []string{"x-api-key", "k1", "x-user", "carol"}, codes.OK, true},
		{grpcUnary, []string{"x-user", "dave"}, codes.OK, false},
		{grpcUnary, []string{"x-user", "dave"}, codes.OK, false},
	} {
		what := grpcCall(step.method, step.kv...)
		r := s.call(step.method, step.kv...)
		if !grpcExpectCode(t, what, r, step.want) || step.want != codes.OK {
			continue
		}
		if got := len(grpcFields(r.header)) > 0; got != step.fields {
			t.Errorf("%s: rate-limit fields in the header metadata: %v, want %v (%v)", what, got, step.fields, r.header)
		}
	}
	if u, o := s.echo.unary.Load(), s.echo.other.Load(); u != 4 || o != 2 {
		t.Errorf("handlers ran Unary %d and Other %d times, want 4 and 2", u, o)
	}
}

// grpcTestDoubleInstall: a middleware that runs twice on one call never
// charges twice silently (DESIGN.md section 4).
func grpcTestDoubleInstall(t *testing.T, h GRPCHarness) {
	rule := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(2), 2)}
	t.Run("SameInterceptorsTwice", func(t *testing.T) {
		// The very interceptors chained twice: the second run lets the
		// call through without charging it or adding fields.
		l := grpcLimiter(t, nil, rule)
		unary, stream := grpcInterceptors(t, h, l, []flow.Option{grpcUserKey(t)})
		s := grpcStartChain(t, []grpc.UnaryServerInterceptor{unary, unary}, []grpc.StreamServerInterceptor{stream, stream})
		for i, left := range []string{"1", "0"} {
			what := fmt.Sprintf("%s #%d through the unary interceptor chained twice", grpcCall(grpcUnary, "x-user", "alice"), i+1)
			r := s.call(grpcUnary, "x-user", "alice")
			if grpcExpectCode(t, what, r, codes.OK) {
				grpcExpectFields(t, what, "header metadata", r.header, map[string]string{
					"x-ratelimit-limit":     "2",
					"x-ratelimit-remaining": left,
					"x-ratelimit-reset":     grpcUnix(time.Duration(i+1) * 30 * time.Minute),
					"ratelimit-policy":      `"per-user";q=2;w=3600`,
					"ratelimit":             fmt.Sprintf(`"per-user";r=%s;t=%d`, left, (i+1)*1800),
				})
			}
		}
		grpcExpectCode(t, grpcCall(grpcUnary, "x-user", "alice")+" #3", s.call(grpcUnary, "x-user", "alice"), codes.ResourceExhausted)
		if n := s.echo.unary.Load(); n != 2 {
			t.Errorf("handler ran %d times for 2 allowed calls, want 2", n)
		}
		msgs := []string{"a", "b"}
		for i, left := range []string{"1", "0"} {
			what := fmt.Sprintf("Stream(x-user=bob) #%d through the stream interceptor chained twice", i+1)
			r := s.stream(msgs, "x-user", "bob")
			if r.err != nil || !slices.Equal(r.echoes, msgs) {
				t.Errorf("%s: echoes %q, status %v; want %q and OK", what, r.echoes, r.err, msgs)
				continue
			}
			if got := r.header.Get("x-ratelimit-remaining"); !slices.Equal(got, []string{left}) {
				t.Errorf("%s: x-ratelimit-remaining = %q, want [%s]: one check, one set of fields", what, got, left)
			}
		}
		r := s.stream(msgs, "x-user", "bob")
		if status.Code(r.err) != codes.ResourceExhausted {
			t.Errorf("Stream(x-user=bob) #3 through the stream interceptor chained twice: status %v, want ResourceExhausted", r.err)
		}
		if n := s.echo.streams.Load(); n != 2 {
			t.Errorf("stream handler ran %d times for 2 allowed streams, want 2", n)
		}
	})
	t.Run("TwoOverOneLimiter", func(t *testing.T) {
		// Two interceptors built over one limiter would each charge every
		// tier: the call fails, as the error path says (Internal), and
		// the reason stays on the server.
		l := grpcLimiter(t, nil, rule)
		opts := []flow.Option{grpcUserKey(t)}
		u1, s1 := grpcInterceptors(t, h, l, opts)
		u2, s2 := grpcInterceptors(t, h, l, opts)
		s := grpcStartChain(t, []grpc.UnaryServerInterceptor{u1, u2}, []grpc.StreamServerInterceptor{s1, s2})
		hidden := flow.ErrInstalledTwice.Error()
		what := grpcCall(grpcUnary, "x-user", "alice") + " through two unary interceptors over one limiter"
		r := s.call(grpcUnary, "x-user", "alice")
		if grpcExpectCode(t, what, r, codes.Internal) {
			if msg := status.Convert(r.err).Message(); strings.Contains(msg, hidden) {
				t.Errorf("%s: status message %q shows the server's error %q to the client", what, msg, hidden)
			}
		}
		if n := s.echo.unary.Load(); n != 0 {
			t.Errorf("handler ran %d times, want 0", n)
		}
		what = "Stream(x-user=bob) through two stream interceptors over one limiter"
		sr := s.stream([]string{"a"}, "x-user", "bob")
		if got := status.Code(sr.err); got != codes.Internal {
			t.Errorf("%s: status %v, want Internal", what, sr.err)
		} else if msg := status.Convert(sr.err).Message(); strings.Contains(msg, hidden) {
			t.Errorf("%s: status message %q shows the server's error %q to the client", what, msg, hidden)
		}
		if n := s.echo.streams.Load(); n != 0 {
			t.Errorf("stream handler ran %d times, want 0", n)
		}
	})
	t.Run("TwoLimiters", func(t *testing.T) {
		// Over two limiters, two interceptors are two policies: both apply.
		wide := grpcLimiter(t, nil, rule)
		narrow := grpcLimiter(t, nil, core.Rule{Name: "narrow", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 1)})
		opts := []flow.Option{grpcUserKey(t)}
		u1, s1 := grpcInterceptors(t, h, wide, opts)
		u2, s2 := grpcInterceptors(t, h, narrow, opts)
		s := grpcStartChain(t, []grpc.UnaryServerInterceptor{u1, u2}, []grpc.StreamServerInterceptor{s1, s2})
		what := grpcCall(grpcUnary, "x-user", "alice")
		grpcExpectCode(t, what+" #1 through interceptors over two limiters", s.call(grpcUnary, "x-user", "alice"), codes.OK)
		r := s.call(grpcUnary, "x-user", "alice")
		if grpcExpectCode(t, what+" #2, denied by the second limiter", r, codes.ResourceExhausted) {
			if _, qf, _ := grpcDetails(r.err); !slices.Equal(grpcSubjects(qf), []string{"narrow"}) {
				t.Errorf("%s #2: QuotaFailure violation subjects = %q, want [narrow]", what, grpcSubjects(qf))
			}
		}
		if n := s.echo.unary.Load(); n != 1 {
			t.Errorf("handler ran %d times, want 1", n)
		}
	})
}

// grpcAuthKey is the type of the context keys under which the NativeFuncs
// case's authentication interceptors store what the caller sent.
type grpcAuthKey string

// grpcAuthFields are the metadata keys the authentication interceptors
// move from the incoming metadata to the context.
var grpcAuthFields = []string{"x-user", "x-plan", "x-cost", "x-skip"}

// grpcAuthCtx returns ctx with each of grpcAuthFields present in its
// incoming metadata moved to a context value under grpcAuthKey(name), as
// authentication stores the caller it established: the key functions
// cannot find them in the metadata.
func grpcAuthCtx(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx) // a copy
	for _, name := range grpcAuthFields {
		if vs := md.Get(name); len(vs) > 0 {
			ctx = context.WithValue(ctx, grpcAuthKey(name), vs[0])
			delete(md, name)
		}
	}
	return metadata.NewIncomingContext(ctx, md)
}

// grpcAuthStream is a stream whose context grpcAuthCtx prepared.
type grpcAuthStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *grpcAuthStream) Context() context.Context { return s.ctx }

func grpcAuthUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(grpcAuthCtx(ctx), req)
}

func grpcAuthStreamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &grpcAuthStream{ServerStream: ss, ctx: grpcAuthCtx(ss.Context())})
}

// grpcTestNativeFuncs: the adapter's native key, plan, cost and skip
// options (GRPCHarness.Native) run with the context the authentication
// interceptor before them prepared and with the call's full method, on
// calls and on streams.
func grpcTestNativeFuncs(t *testing.T, h GRPCHarness) {
	if h.Native == nil {
		t.Fatal("conformance: GRPCHarness.Native is nil: every adapter has native key, plan, cost and skip options, and the suite checks them")
	}
	var (
		mu      sync.Mutex
		methods = map[string]string{} // function name: the full method it saw last
	)
	saw := func(fn, fullMethod string) {
		mu.Lock()
		defer mu.Unlock()
		methods[fn] = fullMethod
	}
	value := func(ctx context.Context, name string) (string, bool) {
		v, ok := ctx.Value(grpcAuthKey(name)).(string)
		return v, ok
	}
	fns := GRPCNativeFuncs{
		User: func(ctx context.Context, fullMethod string) (string, error) {
			saw("User", fullMethod)
			if v, ok := value(ctx, "x-user"); ok {
				return v, nil
			}
			return "", keyfuncs.ErrNotApplicable
		},
		Plan: func(ctx context.Context, fullMethod string) (string, error) {
			saw("Plan", fullMethod)
			if v, ok := value(ctx, "x-plan"); ok {
				return v, nil
			}
			return "", keyfuncs.ErrNotApplicable
		},
		Cost: func(ctx context.Context, fullMethod string) (int64, error) {
			saw("Cost", fullMethod)
			if v, ok := value(ctx, "x-cost"); ok {
				return strconv.ParseInt(v, 10, 64)
			}
			return 1, nil
		},
		Skip: func(ctx context.Context, fullMethod string) bool {
			saw("Skip", fullMethod)
			v, _ := value(ctx, "x-skip")
			return v == "1"
		},
	}
	native := h.Native(t, fns)
	store, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(t0)))
	if err != nil {
		t.Fatalf("conformance: NewMemoryStore: %v", err)
	}
	l := grpcPlanLimiter(t, core.Plans{Default: "free"}, []core.Option{core.WithStore(store)},
		core.Rule{Name: "free", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerHour(2), 2)},
		core.Rule{Name: "pro", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerHour(5), 5)},
	)
	unary, stream := grpcInterceptors(t, h, l, native)
	s := grpcStartChain(t, []grpc.UnaryServerInterceptor{grpcAuthUnary, unary}, []grpc.StreamServerInterceptor{grpcAuthStreamInterceptor, stream})

	// expectSaw checks that the functions ran, each with fullMethod, and
	// forgets what they saw.
	expectSaw := func(what, fullMethod string, fnNames ...string) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		for _, fn := range fnNames {
			if got := methods[fn]; got != fullMethod {
				t.Errorf("%s: the native %s function saw the full method %q, want %q", what, fn, got, fullMethod)
			}
		}
		clear(methods)
	}
	all := []string{"Skip", "User", "Plan", "Cost"}
	for _, step := range []struct {
		kv     []string
		want   codes.Code
		limit  string // x-ratelimit-limit of an allowed call; "": no fields
		left   string // x-ratelimit-remaining
		denier string // the tier of a denial
	}{
		{[]string{"x-user", "alice", "x-plan", "pro"}, codes.OK, "5", "4", ""},
		{[]string{"x-user", "alice", "x-plan", "pro", "x-cost", "3"}, codes.OK, "5", "1", ""},
		{[]string{"x-user", "alice", "x-plan", "pro", "x-skip", "1"}, codes.OK, "", "", ""},
		{[]string{"x-user", "alice", "x-plan", "pro", "x-skip", "1", "x-cost", "5"}, codes.OK, "", "", ""},
		{[]string{"x-user", "alice", "x-plan", "pro", "x-cost", "2"}, codes.ResourceExhausted, "", "", "pro"},
		{[]string{"x-user", "alice", "x-plan", "pro"}, codes.OK, "5", "0", ""}, // the denial took nothing
		{[]string{"x-user", "bob"}, codes.OK, "2", "1", ""},                    // no plan: the default, free
		{[]string{"x-user", "bob", "x-cost", "many"}, codes.Internal, "", "", ""},
	} {
		what := grpcCall(grpcUnary, step.kv...)
		r := s.call(grpcUnary, step.kv...)
		if slices.Contains(step.kv, "x-skip") {
			expectSaw(what, grpcUnary, "Skip")
		} else {
			expectSaw(what, grpcUnary, all...)
		}
		if !grpcExpectCode(t, what, r, step.want) {
			continue
		}
		switch {
		case step.denier != "":
			if _, qf, _ := grpcDetails(r.err); !slices.Equal(grpcSubjects(qf), []string{step.denier}) {
				t.Errorf("%s: QuotaFailure violation subjects = %q, want [%s]", what, grpcSubjects(qf), step.denier)
			}
		case step.want != codes.OK:
		case step.limit == "":
			grpcExpectFields(t, what, "header metadata", r.header, map[string]string{})
		default:
			limit, left := r.header.Get("x-ratelimit-limit"), r.header.Get("x-ratelimit-remaining")
			if !slices.Equal(limit, []string{step.limit}) || !slices.Equal(left, []string{step.left}) {
				t.Errorf("%s: x-ratelimit-limit %q and x-ratelimit-remaining %q, want [%s] and [%s]", what, limit, left, step.limit, step.left)
			}
		}
	}
	if n := s.echo.unary.Load(); n != 6 {
		t.Errorf("handler ran %d times for 6 allowed calls, want 6", n)
	}
	// A stream: carol, on the default plan, opens one at a cost of 2,
	// which empties her tier.
	what := "Stream(x-user=carol, x-cost=2)"
	r := s.stream([]string{"a"}, "x-user", "carol", "x-cost", "2")
	expectSaw(what, grpcStream, all...)
	if r.err != nil {
		t.Errorf("%s: status %v, want OK", what, r.err)
	} else if left := r.header.Get("x-ratelimit-remaining"); !slices.Equal(left, []string{"0"}) {
		t.Errorf("%s: x-ratelimit-remaining %q, want [0]", what, left)
	}
	what = grpcCall(grpcUnary, "x-user", "carol") + " after her stream"
	grpcExpectCode(t, what, s.call(grpcUnary, "x-user", "carol"), codes.ResourceExhausted)
}
