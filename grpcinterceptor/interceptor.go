package grpcinterceptor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// PushbackKey is the trailer that tells gRPC clients how long to wait before
// retrying, in milliseconds (gRFC A6, "Pushback"). grpc-go's retry policy
// reads it, not RetryInfo; a negative value asks the client not to retry.
const PushbackKey = "grpc-retry-pushback-ms"

// UnaryServerInterceptor returns an interceptor that checks every unary call
// against limiter before its handler runs. An allowed call gets the
// rate-limit fields in its header metadata (grpc.SetHeader: they leave with
// the response) and runs its handler; a denied call never reaches the
// handler and ends with a Trailers-Only response (see the package
// documentation). The handler's context records that the interceptor
// checked the call (flow.WithMark), so that the interceptor chained again
// lets it through uncharged and another one over the same limiter fails
// it (see "Installed twice" in the package documentation). It fails with
// an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option (named by its position in opts), an option of another
// adapter, a scope given two key functions, or an enabled rule of the
// limiter's policy whose scope has no key function.
// The interceptor is safe for concurrent use.
func UnaryServerInterceptor(limiter *core.Limiter, opts ...Option) (grpc.UnaryServerInterceptor, error) {
	i, err := newInterceptor(limiter, opts, false)
	if err != nil {
		return nil, err
	}
	return i.unary, nil
}

// StreamServerInterceptor returns an interceptor that checks every stream
// against limiter when it opens, with the stream's context, before its
// handler runs: an allowed stream gets the rate-limit fields in its header
// metadata (ServerStream.SetHeader, sent with the first message or status),
// and a denied one ends at once, Trailers-Only, without its handler running;
// the client sees the status at its first Recv. With WithPerMessage, every
// received message is paced too. The handler's stream has a Context that
// records the check, as UnaryServerInterceptor's handler's context does.
// It fails as UnaryServerInterceptor does.
// The interceptor is safe for concurrent use.
func StreamServerInterceptor(limiter *core.Limiter, opts ...Option) (grpc.StreamServerInterceptor, error) {
	i, err := newInterceptor(limiter, opts, true)
	if err != nil {
		return nil, err
	}
	return i.stream, nil
}

// interceptor is the state shared by the calls of one interceptor.
type interceptor struct {
	engine  *flow.Engine
	msgs    *flow.Engine // prices received messages; nil unless WithPerMessage on a stream
	deny    DenyHandler  // nil: DenialStatus
	onError ErrorHandler // nil: the default status of the outcome
	views   sync.Pool    // *view, for unary calls
}

func newInterceptor(limiter *core.Limiter, opts []Option, stream bool) (*interceptor, error) {
	// The default format of gRPC: lower-case names, as HTTP/2 requires
	// (RFC 9113 section 8.2.1), and no Retry-After or Cache-Control, which
	// gRPC clients do not read. A flow.WithHeaderFormat in opts replaces it.
	defaults := []flow.Option{flow.WithHeaderOptions(core.WithNameCase(core.NamesLower), core.WithRetryAfter(false), core.WithCacheControl(false))}
	e, err := flow.New(limiter, adapter, defaults, opts...)
	if err != nil {
		return nil, err
	}
	i := &interceptor{engine: e}
	i.deny, i.onError = flow.Handlers[DenyHandler, ErrorHandler](e)
	i.views.New = func() any { return new(view) }
	pm, ok := e.Native(perMessageName).(perMessage)
	if !stream || !ok {
		return i, nil
	}
	// The same options, so the same keys, skip and format; the message's
	// price, given last, replaces the stream's cost.
	price := func(keyfuncs.Request) (int64, error) { return 1, nil }
	if cost := pm.cost; cost != nil {
		price = func(r keyfuncs.Request) (int64, error) {
			v, ok := r.(*view)
			if !ok {
				return 0, fmt.Errorf("grpcinterceptor: message cost asked of a %T", r)
			}
			return cost(r, v.msg)
		}
	}
	// A full slice expression, so that the caller's array is never written.
	msgOpts := append(opts[:len(opts):len(opts)], flow.WithCost(price))
	if i.msgs, err = flow.New(limiter, adapter, defaults, msgOpts...); err != nil {
		return nil, err
	}
	return i, nil
}

// unary is the grpc.UnaryServerInterceptor.
func (i *interceptor) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	prev := flow.MarkFrom(ctx)
	var res flow.Result
	if i.engine.Seen(prev, &res) {
		// This interceptor already checked the call (chained twice), or
		// another one over the same limiter did.
		if res.Outcome == flow.Skipped {
			return handler(ctx, req)
		}
		return nil, i.failed(ctx, res.Outcome, res.Err)
	}
	// Key functions must not keep the view (keyfuncs.Request), so it can
	// be reused by the next call.
	v := i.views.Get().(*view)
	v.ctx, v.fullMethod = ctx, info.FullMethod
	i.engine.Check(v, &res)
	*v = view{}
	i.views.Put(v)
	switch res.Outcome {
	case flow.Proceed:
		if md := i.metadata(&res, false); md != nil {
			// Headers leave with the response, or with the status if the
			// handler fails. The error (no gRPC stream in ctx, headers
			// already sent by the handler's caller) costs only the
			// informational fields, so it does not fail the call.
			_ = grpc.SetHeader(ctx, md)
		}
		return handler(flow.WithMark(ctx, i.engine.Mark(prev)), req)
	case flow.Skipped:
		return handler(flow.WithMark(ctx, i.engine.Mark(prev)), req)
	case flow.Denied, flow.Unavailable:
		// Trailers only: nothing on this path may set or send headers, or
		// the response has a header frame and clients do not retry it.
		if md := i.metadata(&res, true); md != nil {
			_ = grpc.SetTrailer(ctx, md)
		}
		// A copy for the deny handler, which may keep what it is given as
		// far as the compiler knows: res stays on the stack of allowed
		// calls.
		d := res.Decision
		return nil, i.denied(ctx, &d)
	}
	return nil, i.failed(ctx, res.Outcome, res.Err)
}

// stream is the grpc.StreamServerInterceptor.
func (i *interceptor) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	prev := flow.MarkFrom(ctx)
	var res flow.Result
	if i.engine.Seen(prev, &res) {
		// As in unary; a stream already checked is paced, if at all, by
		// the interceptor that checked it.
		if res.Outcome == flow.Skipped {
			return handler(srv, ss)
		}
		return i.failed(ctx, res.Outcome, res.Err)
	}
	v := &view{ctx: ctx, fullMethod: info.FullMethod}
	i.engine.Check(v, &res)
	switch res.Outcome {
	case flow.Proceed:
		if md := i.metadata(&res, false); md != nil {
			_ = ss.SetHeader(md) // as in unary: informational
		}
		marked := &markedStream{ServerStream: ss, ctx: flow.WithMark(ctx, i.engine.Mark(prev))}
		if i.msgs != nil {
			return handler(srv, &pacedStream{markedStream: marked, i: i, v: v})
		}
		return handler(srv, marked)
	case flow.Skipped:
		// Not paced either.
		return handler(srv, &markedStream{ServerStream: ss, ctx: flow.WithMark(ctx, i.engine.Mark(prev))})
	case flow.Denied, flow.Unavailable:
		if md := i.metadata(&res, true); md != nil {
			ss.SetTrailer(md)
		}
		d := res.Decision // as in unary
		return i.denied(ctx, &d)
	}
	return i.failed(ctx, res.Outcome, res.Err)
}

// markedStream is a stream whose context records the interceptors that
// checked it (flow.Mark), so that one that runs again on it, chained
// twice, does not charge it twice.
type markedStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, with its flow.Mark.
func (s *markedStream) Context() context.Context { return s.ctx }

// pacedStream holds each received message until its tokens are there.
type pacedStream struct {
	*markedStream
	i *interceptor
	v *view // the stream's view; RecvMsg is never called concurrently
}

// RecvMsg receives the next message and waits for its tokens (see
// WithPerMessage). A message that ends in an error is lost with the stream.
func (s *pacedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	s.v.msg = m
	err := s.i.pace(s.v, s.ServerStream)
	s.v.msg = nil
	return err
}

// minPace is the shortest wait between two checks of one message: a
// denial always carries a positive RetryAfter, and this keeps a store that
// said otherwise from being asked in a busy loop.
const minPace = time.Millisecond

// pace asks the message engine until the message is allowed, sleeping
// each denial's RetryAfter, as core.Limiter.WaitN does.
func (i *interceptor) pace(v *view, ss grpc.ServerStream) error {
	ctx := v.ctx
	for {
		var res flow.Result
		i.msgs.Check(v, &res)
		switch res.Outcome {
		case flow.Proceed, flow.Skipped:
			return nil
		case flow.Denied, flow.Unavailable:
		default:
			return i.failed(ctx, res.Outcome, res.Err)
		}
		d := res.Decision // as in unary
		if d.Reason == core.ReasonLimited {
			wait := max(d.RetryAfter, minPace)
			if dl, ok := ctx.Deadline(); !ok || time.Until(dl) >= wait {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
					t.Stop()
					return i.failed(ctx, flow.ClientGone, ctx.Err())
				}
			}
			// The stream would end before the tokens come: say so now.
		}
		// Mid-stream the trailers follow headers already sent, where the
		// draft's RateLimit fields must not go (draft-ietf-httpapi-
		// ratelimit-headers-11 sections 3.1 and 4.1): only the pushback.
		ss.SetTrailer(metadata.MD{PushbackKey: {pushback(&d)}})
		return i.denied(ctx, &d)
	}
}

// denied returns the status of a denial: the deny handler's, or the default.
func (i *interceptor) denied(ctx context.Context, d *core.Decision) error {
	if i.deny != nil {
		if err := i.deny(ctx, d); err != nil {
			return err
		}
	}
	return DenialStatus(d).Err()
}

// failed returns the status of a call that could not be decided, of
// outcome flow.BadInput, flow.Failed or flow.ClientGone: the error
// handler's, or the default.
func (i *interceptor) failed(ctx context.Context, o flow.Outcome, err error) error {
	if i.onError != nil {
		if serr := i.onError(ctx, err); serr != nil {
			return serr
		}
	}
	switch o {
	case flow.BadInput:
		// The client's own input: it may read what is wrong with it.
		return status.Error(codes.InvalidArgument, err.Error())
	case flow.ClientGone:
		return status.FromContextError(err).Err()
	}
	// err may name keys, rules or a store address: not for clients.
	return status.Error(codes.Internal, "ratelimit: the rate limit could not be decided")
}

// maxFields bounds the metadata of one response: the seven fields of a
// HeaderFormat and the pushback.
const maxFields = 8

// metadata returns the rate-limit fields of res as metadata, and the
// pushback when denial is set, or nil when there is nothing to send. It
// allocates the map, one slice for every value and, through Headers, one
// string.
func (i *interceptor) metadata(res *flow.Result, denial bool) metadata.MD {
	var (
		names, values [maxFields]string
		n             int
	)
	i.engine.Headers(res, func(name, value string) {
		if n < maxFields-1 {
			names[n], values[n] = lower(name), value
			n++
		}
	})
	if denial {
		names[n], values[n] = PushbackKey, pushback(&res.Decision)
		n++
	}
	if n == 0 {
		return nil
	}
	md := make(metadata.MD, n)
	vals := make([]string, n)
	copy(vals, values[:n])
	for k := range n {
		md[names[k]] = vals[k : k+1 : k+1]
	}
	return md
}

// lower returns name in lower case, as HTTP/2 field names must be (RFC 9113
// section 8.2.1); it allocates only for a name that is not.
func lower(name string) string {
	for j := 0; j < len(name); j++ {
		if c := name[j]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(name)
		}
	}
	return name
}

// retryDelay is the wait a denial asks of the client: RetryAfter rounded up
// to the millisecond, the unit of grpc-retry-pushback-ms, so that a client
// never comes back before the tokens are there, and at least 1ms.
func retryDelay(d *core.Decision) time.Duration {
	ms := d.RetryAfter / time.Millisecond
	if d.RetryAfter%time.Millisecond != 0 {
		ms++
	}
	return max(ms, 1) * time.Millisecond
}

// pushback returns the grpc-retry-pushback-ms value of a denial: the retry
// delay in milliseconds, or -1, "do not retry" (gRFC A6), when the cost is
// above a tier's burst and no wait can help.
func pushback(d *core.Decision) string {
	if d.Reason == core.ReasonCostExceedsLimit {
		return "-1"
	}
	return strconv.FormatInt(int64(retryDelay(d)/time.Millisecond), 10)
}

// DenialStatus returns the default status of a denied decision: for a store
// failure under core.FailClosed (core.ReasonUnavailable), codes.Unavailable
// with a google.rpc.RetryInfo detail; for a rate-limit denial,
// codes.ResourceExhausted with a google.rpc.RetryInfo detail (absent when
// the cost is above a tier's burst, which no wait cures) and a
// google.rpc.QuotaFailure detail with one violation per denying tier, in
// policy order: Subject and QuotaId are the rule's name, QuotaValue its
// burst or window limit, and Description says the scope, what is left and
// the wait. RetryInfo's delay is RetryAfter rounded up to the millisecond,
// the same instant as the grpc-retry-pushback-ms trailer. DenialStatus is
// for deny handlers that add to the default; it returns an OK status for an
// allowed decision.
func DenialStatus(d *core.Decision) *status.Status {
	if d.Allowed {
		return status.New(codes.OK, "")
	}
	delay := retryDelay(d)
	var st *status.Status
	switch d.Reason {
	case core.ReasonUnavailable:
		st = status.New(codes.Unavailable, fmt.Sprintf("ratelimit: rate limiting is temporarily unavailable; retry after %v", delay))
		return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	case core.ReasonCostExceedsLimit:
		st = status.Newf(codes.ResourceExhausted, "ratelimit: rule %q (scope %s) denied the request: its cost %d is above the limit of %d and can never pass", d.Rule, d.Scope, d.Cost, d.Limit)
		return withDetails(st, quotaFailure(d))
	}
	st = status.Newf(codes.ResourceExhausted, "ratelimit: rule %q (scope %s) denied the request; retry after %v", d.Rule, d.Scope, delay)
	return withDetails(st, &errdetails.RetryInfo{RetryDelay: durationpb.New(delay)}, quotaFailure(d))
}

// withDetails returns st with details, or st itself should they not
// marshal, which the well-known messages always do.
func withDetails(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	if s, err := st.WithDetails(details...); err == nil {
		return s
	}
	return st
}

// quotaFailure describes every denying tier of d.
func quotaFailure(d *core.Decision) *errdetails.QuotaFailure {
	qf := &errdetails.QuotaFailure{}
	for _, t := range d.Tiers() {
		if t.Allowed || t.Rule == nil {
			continue
		}
		var desc string
		if t.Reason == core.ReasonCostExceedsLimit {
			desc = fmt.Sprintf("rule %q (scope %s): the cost %d is above its limit of %d", t.Rule.Name, t.Rule.Scope, d.Cost, t.Limit.Burst())
		} else {
			desc = fmt.Sprintf("rule %q (scope %s): %d of %d left; retry after %v", t.Rule.Name, t.Rule.Scope, t.Remaining, t.Limit.Burst(), retryDelay(&core.Decision{RetryAfter: t.RetryAfter}))
		}
		qf.Violations = append(qf.Violations, &errdetails.QuotaFailure_Violation{
			Subject:     t.Rule.Name,
			QuotaId:     t.Rule.Name,
			QuotaValue:  t.Limit.Burst(),
			Description: desc,
		})
	}
	return qf
}

// view is the keyfuncs.Request of a call: its context, full method, peer
// and incoming metadata. It is the flow.NativeRequest[*view] that
// WithKeyFunc's functions read.
type view struct {
	ctx        context.Context
	fullMethod string
	addr       string // the peer's address, once read
	addrRead   bool
	msg        any // the message being priced, on a paced stream
}

// Context returns the call's context.
func (v *view) Context() context.Context { return v.ctx }

// Method returns "": gRPC has no HTTP method.
func (v *view) Method() string { return "" }

// Route returns "": gRPC has no route templates. keyfuncs.Endpoint and
// keyfuncs.GRPCMethod key by the full method instead.
func (v *view) Route() string { return "" }

// FullMethod returns the call's method, "/package.Service/Method".
func (v *view) FullMethod() string { return v.fullMethod }

// Native returns the view itself, whose context and full method the key
// functions of WithKeyFunc read.
func (v *view) Native() *view { return v }

// RemoteAddr returns the address of the peer (peer.FromContext), as
// net.Addr.String spells it, or "" when there is none. The string is made
// once per view.
func (v *view) RemoteAddr() string {
	if !v.addrRead {
		if p, ok := peer.FromContext(v.ctx); ok && p.Addr != nil {
			v.addr = addrString(p.Addr)
		}
		v.addrRead = true
	}
	return v.addr
}

// addrString returns a.String() with one allocation for a TCP address,
// where net.TCPAddr.String makes two.
func addrString(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta == nil {
		return a.String()
	}
	ap := ta.AddrPort()
	if !ap.Addr().IsValid() || ta.Port < 0 || ta.Port > 65535 {
		return a.String()
	}
	if ap.Addr().Is4In6() {
		// net.IP holds IPv4 in 16 bytes; String prints it as IPv4.
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	var buf [64]byte
	return string(ap.AppendTo(buf[:0]))
}

// Values returns the values of the incoming metadata key name, matched
// case-insensitively (gRPC stores keys in lower case). grpc-go returns a
// copy, the one allocation it forces, and only for a key that is present.
func (v *view) Values(name string) []string {
	vs := metadata.ValueFromIncomingContext(v.ctx, name)
	if len(vs) == 0 {
		return nil
	}
	return vs
}
