package goredis_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
)

// productionLimiter is the README's recommended set-up on go-redis.
func productionLimiter(addrs []string, cluster bool, policy *core.Policy) (*core.Limiter, *goredis.Store, error) {
	store, err := goredis.Open(&redis.UniversalOptions{
		Addrs:         addrs, // host:port; several, or IsClusterMode, for a Cluster; MasterName for Sentinel
		IsClusterMode: cluster,
		// The client's other defaults are fine: Open sets ContextTimeoutEnabled,
		// so the store's 100ms bound covers dials, retries and replies.
	}, goredis.WithBreaker(3, 250*time.Millisecond))
	if err != nil {
		return nil, nil, err
	}
	limiter, err := core.NewLimiter(policy, core.WithStore(store), core.WithFailureMode(core.FailFallback))
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return limiter, store, nil
}

func TestProductionSetUp(t *testing.T) {
	redistests.CheckVerbatim(t, "goredis", "production_test.go")
	redistests.RunProduction(t, func(t *testing.T, addrs []string, cluster bool, p *core.Policy) redistests.Production {
		l, st, err := productionLimiter(addrs, cluster, p)
		if err != nil {
			t.Fatal(err)
		}
		return redistests.Production{Limiter: l, States: st.BreakerStates, Close: st.Close}
	})
}
