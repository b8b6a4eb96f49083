package rueidis_test

import (
	"testing"
	"time"

	"github.com/redis/rueidis"

	rlrueidis "github.com/bucketry/ratelimit/adapters/rueidis"
	redistests "github.com/bucketry/ratelimit/adapters/test"
	"github.com/bucketry/ratelimit/core"
)

// productionLimiter is the README's recommended set-up on rueidis.
func productionLimiter(addrs []string, policy *core.Policy) (*core.Limiter, *rlrueidis.Store, error) {
	store, err := rlrueidis.Open(rueidis.ClientOption{
		InitAddress: addrs, // host:port; rueidis finds out whether it is a Cluster; Sentinel.MasterSet for Sentinel
	}, rlrueidis.WithBreaker(3, 250*time.Millisecond), rlrueidis.WithLocalDenials())
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
	redistests.CheckVerbatim(t, "rueidis", "production_test.go")
	redistests.RunProduction(t, func(t *testing.T, addrs []string, _ bool, p *core.Policy) redistests.Production {
		l, st, err := productionLimiter(addrs, p)
		if err != nil {
			t.Fatal(err)
		}
		return redistests.Production{Limiter: l, States: st.BreakerStates, Close: st.Close}
	})
}
