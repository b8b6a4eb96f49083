package main

import (
	"context"
	"net"
	"strconv"
	"strings"
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
	"github.com/bucketry/ratelimit/examples/internal/apitest"
	"github.com/bucketry/ratelimit/examples/internal/limits"
	"github.com/bucketry/ratelimit/grpcinterceptor"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestLimits drives the service over gRPC on the in-memory store, with a
// clock that stands still: each tier denies exactly when its tokens run out.
func TestLimits(t *testing.T) {
	store, err := core.NewMemoryStore(core.WithClock(core.NewManualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))))
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := limits.NewLimiter(store)
	if err != nil {
		t.Fatal(err)
	}
	check(t, start(t, limiter), apitest.Scenario(), 0)
}

// TestRedis runs the service on a real Redis server, as -redis does.
func TestRedis(t *testing.T) {
	redis := redistest.Standalone(t)
	limiter, closeStore, err := limits.Flags{Redis: redis.Addr}.NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeStore() })
	// Redis decides on its own clock, which moves between the calls: a wait
	// may be shorter than the step's by that much, far less than a second.
	check(t, start(t, limiter), apitest.Free(), time.Second)
}

// start serves the service of limiter as main does, on a free loopback
// port, and returns a client connection to it. When the test ends the
// server stops as on SIGTERM, and serve must return nil.
func start(t *testing.T, limiter *core.Limiter) *grpc.ClientConn {
	t.Helper()
	srv, err := newServer(limiter)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, srv) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve after shutdown = %v, want nil", err)
		}
	})
	return conn
}

// check makes the calls of steps in order, Search or Get, and checks each
// answer: OK or ResourceExhausted, the deciding tier in the ratelimit
// metadata, x-ratelimit-remaining, and for a denial the pushback and the
// status details. A wait may be shorter than the step's by less than slack.
func check(t *testing.T, conn *grpc.ClientConn, steps []apitest.Step, slack time.Duration) {
	t.Helper()
	for i, s := range steps {
		method, arg := getMethod, "42"
		if s.Search {
			method, arg = searchMethod, "go"
		}
		var md []string
		s.Header(func(name, value string) { md = append(md, strings.ToLower(name), value) })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
		var header, trailer metadata.MD
		err := conn.Invoke(ctx, method, wrapperspb.String(arg), new(wrapperspb.StringValue), grpc.Header(&header), grpc.Trailer(&trailer))
		cancel()
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("step %d, %v: "+format, append([]any{i + 1, s}, args...)...)
		}
		want := codes.OK
		if !s.Allowed {
			want = codes.ResourceExhausted
		}
		if status.Code(err) != want {
			fail("%v, want %v", err, want)
		}
		fields := header
		if !s.Allowed {
			fields = trailer // a denial is Trailers-Only
		}
		if got := first(fields, "ratelimit"); !strings.HasPrefix(got, strconv.Quote(s.Tier)+";") {
			fail("ratelimit = %q, want the %q tier", got, s.Tier)
		}
		if got, want := first(fields, "x-ratelimit-remaining"), strconv.FormatInt(s.Remaining, 10); got != want {
			fail("x-ratelimit-remaining = %q, want %q", got, want)
		}
		if s.Allowed {
			continue
		}
		// The wait is exact to the millisecond, less the slack.
		wrongWait := func(d time.Duration) bool { return d > s.RetryAfter || d <= s.RetryAfter-slack-time.Millisecond }
		pushback, perr := strconv.ParseInt(first(trailer, grpcinterceptor.PushbackKey), 10, 64)
		if perr != nil || wrongWait(time.Duration(pushback)*time.Millisecond) {
			fail("%s = %q, want %d", grpcinterceptor.PushbackKey, first(trailer, grpcinterceptor.PushbackKey), s.RetryAfter.Milliseconds())
		}
		var retry time.Duration
		var violated []string
		for _, d := range status.Convert(err).Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				retry = d.GetRetryDelay().AsDuration()
			case *errdetails.QuotaFailure:
				for _, v := range d.GetViolations() {
					violated = append(violated, v.GetSubject())
				}
			}
		}
		if wrongWait(retry) || len(violated) != 1 || violated[0] != s.Tier {
			fail("RetryInfo %v, QuotaFailure %q; want %v, [%q]", retry, violated, s.RetryAfter, s.Tier)
		}
	}
}

func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
