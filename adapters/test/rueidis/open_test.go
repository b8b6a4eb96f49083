package rueidis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// TestOpenInvalidAddress checks that Open refuses every address that is
// not host:port, naming the field, and a bad store option, before it dials.
func TestOpenInvalidAddress(t *testing.T) {
	redistests.CheckLeaks(t)
	for _, tc := range []struct {
		name string
		o    rueidis.ClientOption
		opts []rstore.Option
		want []string // in the error
		not  []string // not in the error
	}{
		{name: "no address", want: []string{"no address in ClientOption.InitAddress"}},
		{name: "empty address", o: rueidis.ClientOption{InitAddress: []string{""}}, want: []string{"ClientOption.InitAddress[0]", "empty address"}},
		{name: "missing port", o: rueidis.ClientOption{InitAddress: []string{"127.0.0.1"}}, want: []string{"ClientOption.InitAddress[0]", `"127.0.0.1"`}},
		{name: "host name without port", o: rueidis.ClientOption{InitAddress: []string{"redis.internal"}}, want: []string{"ClientOption.InitAddress[0]", `"redis.internal"`}},
		{name: "no host", o: rueidis.ClientOption{InitAddress: []string{":6379"}}, want: []string{"ClientOption.InitAddress[0]", "no host"}},
		{name: "port 0", o: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:0"}}, want: []string{"port must be 1 to 65535"}},
		{name: "port above 65535", o: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:65536"}}, want: []string{"port must be 1 to 65535"}},
		{name: "second of two", o: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:7000", "127.0.0.1"}},
			want: []string{"ClientOption.InitAddress[1]"}, not: []string{"InitAddress[0]"}},
		{name: "every bad address", o: rueidis.ClientOption{InitAddress: []string{"", "127.0.0.1:7000", "x"}},
			want: []string{"ClientOption.InitAddress[0]", "ClientOption.InitAddress[2]"}, not: []string{"InitAddress[1]"}},
		{name: "bad option", o: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}}, opts: []rstore.Option{rstore.WithTimeout(0)},
			want: []string{"WithTimeout"}},
		{name: "bad option and WithRequireRedis", o: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:1"}},
			opts: []rstore.Option{rstore.WithRequireRedis(), rstore.WithBreaker(0, time.Second)}, want: []string{"WithBreaker"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := rstore.Open(tc.o, tc.opts...)
			redistests.WantInvalid(t, s != nil, err, tc.want, tc.not)
		})
	}
}

// TestOpenWhileDown: see redistests.RunOpenWhileDown. rueidis.NewClient
// fails while Redis is down; Open returns a store anyway, which builds its
// client in the background.
func TestOpenWhileDown(t *testing.T) {
	redistests.RunOpenWhileDown(t, "rueidis", func(addr, prefix string) (redistests.Opened, error) {
		return rstore.Open(rueidis.ClientOption{InitAddress: []string{addr}}, rstore.WithPrefix(prefix))
	})
}

// TestOpenRequireRedis: see redistests.RunOpenRequireRedis.
func TestOpenRequireRedis(t *testing.T) {
	redistests.RunOpenRequireRedis(t, func(addr string) (*rstore.Store, error) {
		return rstore.Open(rueidis.ClientOption{InitAddress: []string{addr}}, rstore.WithRequireRedis(), rstore.WithPrefix(redistests.NewPrefix()))
	})
}

// TestOpenClose checks that Close closes the client Open made, after which
// the store fails with rueidis's ErrClosing, and that Close of a store made
// by New leaves the caller's client open.
func TestOpenClose(t *testing.T) {
	redistests.CheckLeaks(t)
	srv := redistest.Standalone(t)
	ctx := context.Background()
	policy := redistests.Policy(t, core.Rule{Name: "close", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 5)})
	req := core.Request{User: "u"}

	s, err := rstore.Open(rueidis.ClientOption{InitAddress: []string{srv.Addr}}, rstore.WithPrefix(redistests.NewPrefix()))
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
	if !errors.Is(err, core.ErrUnavailable) || !errors.Is(d.Err, rueidis.ErrClosing) || d.Allowed {
		t.Errorf("Allow after Close = %+v, %v; want a FailClosed denial wrapping rueidis.ErrClosing", d, err)
	}

	client := newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr}})
	n, err := rstore.New(client, rstore.WithPrefix(redistests.NewPrefix()))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("Close of a store made by New = %v, want nil", err)
	}
	if err := client.Do(ctx, client.B().Ping().Build()).Error(); err != nil {
		t.Errorf("PING on the caller's client after the store's Close = %v; want it open", err)
	}
	lim = redistests.Limiter(t, policy, core.WithStore(n), core.WithFailureMode(core.FailClosed))
	if d, err := lim.Allow(ctx, req); err != nil || d.Degraded || !d.Allowed {
		t.Errorf("Allow on a store made by New after its Close = %+v, %v; want allowed from Redis", d, err)
	}
}
