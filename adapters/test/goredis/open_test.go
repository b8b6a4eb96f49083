package goredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestOpenInvalidAddress checks that Open refuses every address that is
// not host:port, naming the field, before it builds a client; and that a
// bad store option fails Open as it fails New, closing the client Open
// built (the leak check sees its goroutines otherwise).
func TestOpenInvalidAddress(t *testing.T) {
	redistests.CheckLeaks(t)
	for _, tc := range []struct {
		name string
		o    *redis.UniversalOptions
		opts []goredis.Option
		want []string // in the error
		not  []string // not in the error
	}{
		{name: "nil options", want: []string{"goredis: Open: nil options"}},
		{name: "no address", o: &redis.UniversalOptions{}, want: []string{"no address in UniversalOptions.Addrs"}},
		{name: "empty address", o: &redis.UniversalOptions{Addrs: []string{""}}, want: []string{"UniversalOptions.Addrs[0]", "empty address"}},
		{name: "missing port", o: &redis.UniversalOptions{Addrs: []string{"127.0.0.1"}}, want: []string{"UniversalOptions.Addrs[0]", `"127.0.0.1"`}},
		{name: "host name without port", o: &redis.UniversalOptions{Addrs: []string{"redis.internal"}}, want: []string{"UniversalOptions.Addrs[0]", `"redis.internal"`}},
		{name: "no host", o: &redis.UniversalOptions{Addrs: []string{":6379"}}, want: []string{"UniversalOptions.Addrs[0]", "no host"}},
		{name: "port 0", o: &redis.UniversalOptions{Addrs: []string{"127.0.0.1:0"}}, want: []string{"port must be 1 to 65535"}},
		{name: "port above 65535", o: &redis.UniversalOptions{Addrs: []string{"127.0.0.1:65536"}}, want: []string{"port must be 1 to 65535"}},
		{name: "named port", o: &redis.UniversalOptions{Addrs: []string{"127.0.0.1:redis"}}, want: []string{"port must be 1 to 65535"}},
		{name: "second of two", o: &redis.UniversalOptions{Addrs: []string{"127.0.0.1:7000", "127.0.0.1"}},
			want: []string{"UniversalOptions.Addrs[1]"}, not: []string{"Addrs[0]"}},
		{name: "every bad address", o: &redis.UniversalOptions{Addrs: []string{"", "127.0.0.1:7000", "x"}},
			want: []string{"UniversalOptions.Addrs[0]", "UniversalOptions.Addrs[2]"}, not: []string{"Addrs[1]"}},
		{name: "bad option", o: &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}}, opts: []goredis.Option{goredis.WithTimeout(0)},
			want: []string{"WithTimeout"}},
		{name: "bad option in Cluster", o: &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, opts: []goredis.Option{goredis.WithBreaker(0, time.Second)},
			want: []string{"WithBreaker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := goredis.Open(tc.o, tc.opts...)
			redistests.WantInvalid(t, s != nil, err, tc.want, tc.not)
		})
	}
}

// TestOpenWhileDown: see redistests.RunOpenWhileDown.
func TestOpenWhileDown(t *testing.T) {
	redistests.RunOpenWhileDown(t, "goredis", func(addr, prefix string) (redistests.Opened, error) {
		return goredis.Open(&redis.UniversalOptions{Addrs: []string{addr}}, goredis.WithPrefix(prefix))
	})
}

// TestOpenRequireRedis: see redistests.RunOpenRequireRedis.
func TestOpenRequireRedis(t *testing.T) {
	redistests.RunOpenRequireRedis(t, func(addr string) (*goredis.Store, error) {
		return goredis.Open(&redis.UniversalOptions{Addrs: []string{addr}}, goredis.WithRequireRedis(), goredis.WithPrefix(redistests.NewPrefix()))
	})
}

// TestOpenClose checks that Close closes the client Open made, after which
// the store fails with go-redis's ErrClosed, and that Close of a store made
// by New leaves the caller's client open.
func TestOpenClose(t *testing.T) {
	redistests.CheckLeaks(t)
	srv := redistest.Standalone(t)
	ctx := context.Background()
	policy := redistests.Policy(t, core.Rule{Name: "close", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 5)})
	req := core.Request{User: "u"}

	s, err := goredis.Open(&redis.UniversalOptions{Addrs: []string{srv.Addr}}, goredis.WithPrefix(redistests.NewPrefix()))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	lim := redistests.Limiter(t, policy, core.WithStore(s), core.WithFailureMode(core.FailClosed))
	if d, err := lim.Allow(ctx, req); err != nil || d.Degraded || !d.Allowed {
		t.Fatalf("Allow before Close = %+v, %v; want allowed from Redis", d, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close = %v, want nil", err)
	}
	d, err := lim.Allow(ctx, req)
	if !errors.Is(err, core.ErrUnavailable) || !errors.Is(d.Err, redis.ErrClosed) || d.Allowed {
		t.Errorf("Allow after Close = %+v, %v; want a FailClosed denial wrapping redis.ErrClosed", d, err)
	}

	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer client.Close()
	n, err := goredis.New(client, goredis.WithPrefix(redistests.NewPrefix()))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close of a store made by New = %v, want nil", err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		t.Errorf("PING on the caller's client after the store's Close = %v; want it open", err)
	}
	lim = redistests.Limiter(t, policy, core.WithStore(n), core.WithFailureMode(core.FailClosed))
	if d, err := lim.Allow(ctx, req); err != nil || d.Degraded || !d.Allowed {
		t.Errorf("Allow on a store made by New after its Close = %+v, %v; want allowed from Redis", d, err)
	}
}
