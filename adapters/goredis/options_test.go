package goredis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
)

// TestNew checks New's validation. go-redis clients connect on first use,
// so none of these needs a server.
func TestNew(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	withTimeouts := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	t.Cleanup(func() { withTimeouts.Close() })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { cluster.Close() })
	clusterWithTimeouts := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { clusterWithTimeouts.Close() })
	emptyAddr := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{""}, ContextTimeoutEnabled: true})
	t.Cleanup(func() { emptyAddr.Close() })
	noPort := redis.NewClient(&redis.Options{Addr: "redis.internal", ContextTimeoutEnabled: true})
	t.Cleanup(func() { noPort.Close() })
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []goredis.Option
		want   []string // in the error; none: no error
	}{
		{"defaults", withTimeouts, nil, nil},
		{"cluster", clusterWithTimeouts, nil, nil},
		{"breaker", withTimeouts, []goredis.Option{goredis.WithBreaker(3, time.Second)}, nil},
		{"client without ContextTimeoutEnabled", c, nil, []string{"ContextTimeoutEnabled"}},
		{"cluster client without ContextTimeoutEnabled", cluster, nil, []string{"ContextTimeoutEnabled"}},
		{"empty address", emptyAddr, nil, []string{"address"}},
		{"no port", noPort, nil, []string{"address \"redis.internal\""}},
		{"zero timeout", withTimeouts, []goredis.Option{goredis.WithTimeout(0)}, []string{"WithTimeout: the timeout must be > 0"}},
		{"zero breaker failures", withTimeouts, []goredis.Option{goredis.WithBreaker(0, time.Second)}, []string{"WithBreaker: failures"}},
		{"zero breaker cooldown", withTimeouts, []goredis.Option{goredis.WithBreaker(1, 0)}, []string{"WithBreaker: cooldown"}},
		{"timeout honoured", withTimeouts, []goredis.Option{goredis.WithTimeout(time.Second)}, nil},
		{"nil client", nil, nil, []string{"goredis: nil client"}},
		{"typed nil client", (*redis.Client)(nil), nil, []string{"goredis: nil client"}},
		{"typed nil cluster client", (*redis.ClusterClient)(nil), []goredis.Option{goredis.WithTimeout(time.Second)}, []string{"goredis: nil client"}},
		{"nil option", withTimeouts, []goredis.Option{goredis.WithPrefix("p"), nil}, []string{"goredis: option 1 is nil"}},
		{"nil clock", c, []goredis.Option{goredis.WithClientClock(nil)}, []string{"goredis: WithClientClock: nil clock"}},
		{"typed nil clock", c, []goredis.Option{goredis.WithClientClock((*core.ManualClock)(nil))}, []string{"goredis: WithClientClock: nil clock"}},
		{"empty prefix", c, []goredis.Option{goredis.WithPrefix("")}, []string{"WithPrefix"}},
		{"control character in prefix", c, []goredis.Option{goredis.WithPrefix("a\nb")}, []string{"WithPrefix"}},
		{"short secret", c, []goredis.Option{goredis.WithHashedIdentities([]byte("short"))}, []string{"WithHashedIdentities"}},
		{"negative timeout", c, []goredis.Option{goredis.WithTimeout(-time.Second)}, []string{"WithTimeout"}},

		{"negative min TTL", c, []goredis.Option{goredis.WithMinTTL(-time.Millisecond)}, []string{"WithMinTTL"}},
		{"every problem", nil, []goredis.Option{nil, goredis.WithPrefix(""), goredis.WithClientClock(nil)},
			[]string{"option 0 is nil", "WithPrefix", "WithClientClock", "nil client"}},
		{"min TTL above MaxSpan", c, []goredis.Option{goredis.WithMinTTL(core.MaxSpan + time.Millisecond)}, []string{"WithMinTTL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := goredis.New(tc.client, tc.opts...)
			if len(tc.want) == 0 {
				if err != nil || s == nil {
					t.Fatalf("New = %v, %v; want a store", s, err)
				}
				return
			}
			if s != nil || !errors.Is(err, core.ErrInvalidOption) {
				t.Fatalf("New = %v, %v; want an error wrapping core.ErrInvalidOption", s, err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New = %v, want it to say %q", err, want)
				}
			}
		})
	}
}
