package grpcinterceptor_test

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/grpcinterceptor"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// serverStream is a grpc.ServerStream that receives msgs and records
// metadata, so that a stream interceptor can be called without a server.
type serverStream struct {
	ctx             context.Context
	msgs            []string
	header, trailer metadata.MD
}

func (s *serverStream) SetHeader(md metadata.MD) error {
	s.header = metadata.Join(s.header, md)
	return nil
}
func (s *serverStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *serverStream) SetTrailer(md metadata.MD)       { s.trailer = metadata.Join(s.trailer, md) }
func (s *serverStream) Context() context.Context        { return s.ctx }
func (s *serverStream) SendMsg(any) error               { return nil }
func (s *serverStream) RecvMsg(m any) error {
	if len(s.msgs) == 0 {
		return io.EOF
	}
	m.(*wrapperspb.StringValue).Value, s.msgs = s.msgs[0], s.msgs[1:]
	return nil
}

// drain is a stream handler that receives until an error, recording what
// it got.
func drain(got *[]string) grpc.StreamHandler {
	return func(_ any, ss grpc.ServerStream) error {
		for {
			m := new(wrapperspb.StringValue)
			if err := ss.RecvMsg(m); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			*got = append(*got, m.GetValue())
		}
	}
}

var streamInfo = &grpc.StreamServerInfo{FullMethod: "/test.Service/Stream", IsClientStream: true}

// TestPerMessageFailures: a paced stream fails mid-stream only when no
// wait can help: a message above the burst, or a wait past the deadline.
// Each message costs its length in bytes.
func TestPerMessageFailures(t *testing.T) {
	byLength := grpcinterceptor.WithPerMessage(func(_ keyfuncs.Request, msg any) (int64, error) {
		return int64(len(msg.(*wrapperspb.StringValue).GetValue())), nil
	})
	for _, tc := range []struct {
		name     string
		msgs     []string
		deadline time.Duration // 0: none
		got      []string      // received before the failure
		code     codes.Code
		pushback string
	}{
		// Burst 4: the open takes 1, "ab" 2, and 7 bytes can never pass.
		{"above the burst", []string{"ab", "abcdefg"}, 0, []string{"ab"}, codes.ResourceExhausted, "-1"},
		// "ab" and "c" take the last 3 tokens; "d" needs a minute.
		{"past the deadline", []string{"ab", "c", "d"}, time.Second, []string{"ab", "c"}, codes.ResourceExhausted, "60000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := frozen(t, core.Rule{Name: "per-stream", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 4)})
			si, err := grpcinterceptor.StreamServerInterceptor(l, byLength)
			if err != nil {
				t.Fatal(err)
			}
			ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: testAddr("192.0.2.1:4711")})
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			ss := &serverStream{ctx: ctx, msgs: tc.msgs}
			var got []string
			start := time.Now()
			err = si(nil, ss, streamInfo, drain(&got))
			if elapsed := time.Since(start); elapsed > tc.deadline/2+100*time.Millisecond {
				t.Errorf("failed after %v, want at once", elapsed)
			}
			if status.Code(err) != tc.code || !slices.Equal(got, tc.got) {
				t.Errorf("stream of %q = %v after receiving %q; want %v after %q", tc.msgs, err, got, tc.code, tc.got)
			}
			if pb := ss.trailer.Get(grpcinterceptor.PushbackKey); !slices.Equal(pb, []string{tc.pushback}) {
				t.Errorf("pushback trailer %q, want %q", pb, tc.pushback)
			}
			if ss.header.Get("ratelimit") == nil {
				t.Errorf("no rate-limit fields in the header metadata of the allowed stream: %v", ss.header)
			}
		})
	}
}

// TestPerMessageSkip: a stream that WithSkip exempts is not paced.
func TestPerMessageSkip(t *testing.T) {
	l := frozen(t, core.Rule{Name: "per-stream", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	si, err := grpcinterceptor.StreamServerInterceptor(l,
		flow.WithSkip(func(keyfuncs.Request) bool { return true }),
		grpcinterceptor.WithPerMessage(nil))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []string{"a", "b", "c"}
	ss := &serverStream{ctx: peer.NewContext(context.Background(), &peer.Peer{Addr: testAddr("192.0.2.1:4711")}), msgs: msgs}
	var got []string
	if err := si(nil, ss, streamInfo, drain(&got)); err != nil || !slices.Equal(got, msgs) || len(ss.header) != 0 {
		t.Errorf("skipped stream = %v, received %q, header %v; want every message, no error, no header", err, got, ss.header)
	}
}
