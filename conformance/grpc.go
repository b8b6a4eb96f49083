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
	// Required.
	Interceptors func(t testing.TB, limiter *core.Limiter, opts []flow.Option) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor)
	// PacedStream returns the stream server interceptor of limiter with
	// opts and per-message pacing on, every received message costing 1
	// token. Required: DESIGN.md section 7 asks every gRPC adapter for it.
	PacedStream func(t testing.TB, limiter *core.Limiter, opts []flow.Option) grpc.StreamServerInterceptor
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
//   - PerMethodKeys, MetadataKeys: keyfuncs.GRPCMethod and
//     keyfuncs.Metadata key the buckets.
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
	t.Run("PerMethodKeys", func(t *testing.T) { grpcTestPerMethod(t, h) })
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
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("conformance: cannot listen on 127.0.0.1:0 for the gRPC server: %v", err)
	}
	var sopts []grpc.ServerOption
	if unary != nil {
		sopts = append(sopts, grpc.UnaryInterceptor(unary))
	}
	if stream != nil {
		sopts = append(sopts, grpc.StreamInterceptor(stream))
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
	unary, stream := h.Interceptors(t, l, opts)
	if unary == nil || stream == nil {
		t.Fatal("conformance: GRPCHarness.Interceptors returned a nil interceptor")
	}
	return grpcStart(t, unary, stream, dopts...)
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
	p, err := core.NewPolicy(rules...)
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
	observe := core.WithObserver(func(_ context.Context, _ *core.Request, d *core.Decision) {
		mu.Lock()
		defer mu.Unlock()
		decisions++
		if !d.Allowed {
			retry = append(retry, d.RetryAfter)
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
