package redistests

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Figures of the reload soak.
const (
	// SoakReloads is how many policies the soak loads, one after another.
	SoakReloads = 10_000
	// SoakRules is the number of rules of each policy.
	SoakRules = 20
	// SoakEvery is how many reloads pass between two heap samples.
	SoakEvery = 1_000
	// SoakMargin is how much the heap may grow from the sample after the
	// first SoakEvery reloads to the last. A cache that kept every replaced
	// policy's limits would cost about 13 KB a reload here, over 100 MB
	// between those samples; a flat heap moves by less than 100 KB.
	SoakMargin = 1 << 20
)

// soakPolicy returns the policy of reload gen: SoakRules rules of the same
// names, whose numbers change from one reload to the next as a rule file's
// edits would, and which a request of a user always meets in full. The
// first rule is tight, so that requests are denied as well as allowed.
func soakPolicy(t testing.TB, gen int) *core.Policy {
	t.Helper()
	rules := make([]core.Rule, SoakRules)
	for j := range rules {
		b := int64(1000 + gen%3 + j)
		var l core.Limit
		switch j % 4 {
		case 0:
			l = core.TokenBucket(core.PerSecond(1000), b)
		case 1:
			l = core.FixedWindow(b, time.Second)
		case 2:
			l = core.SlidingWindow(b, time.Second)
		case 3:
			l = core.Shaping(core.PerSecond(1000), b, time.Millisecond)
		}
		scope := core.ScopeUser
		if j%5 == 4 {
			scope = core.ScopeGlobal
		}
		rules[j] = core.Rule{Name: "soak" + strconv.Itoa(j), Scope: scope, Limit: l}
	}
	rules[0].Limit = core.TokenBucket(core.PerSecond(100), int64(1+gen%2))
	return Policy(t, rules...)
}

// RunReloadSoak reloads a Limiter on a store from newStore SoakReloads
// times, with decisions between reloads, as a service whose rules are
// refreshed often does: the heap, sampled after a garbage collection every
// SoakEvery reloads, must stay flat. Nothing the store or the script
// arguments cache for a policy's limits may outlive the policy. name labels
// the figures, logged in one line.
func RunReloadSoak(t *testing.T, name string, newStore func(t testing.TB, o Options) core.Store) {
	ctx := context.Background()
	// Local denials: they remember the limits a denial was decided under.
	st := newStore(t, Options{LocalDenials: true})
	l := Limiter(t, soakPolicy(t, 0), core.WithStore(st), core.WithFailureMode(core.FailClosed))
	heap := func() uint64 {
		// Twice: the first collection runs the cleanups of the caches'
		// entries for unreachable limits, the second frees what they drop.
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var (
		samples         []uint64
		allowed, denied int
	)
	for gen := 1; gen <= SoakReloads; gen++ {
		if err := l.SetPolicy(soakPolicy(t, gen)); err != nil {
			t.Fatalf("reload %d: SetPolicy: %v", gen, err)
		}
		req := core.Request{User: "user" + strconv.Itoa(gen%8)}
		for range 2 {
			d, err := l.Allow(ctx, req)
			if err != nil {
				t.Fatalf("reload %d: Allow(%s): %v", gen, req.User, err)
			}
			if d.Allowed {
				allowed++
			} else {
				denied++
			}
		}
		if gen%SoakEvery == 0 {
			samples = append(samples, heap())
		}
	}
	var line strings.Builder
	fmt.Fprintf(&line, "reload soak[%s]: heap", name)
	for i, s := range samples {
		sep := " "
		if i == 0 || i == len(samples)-1 {
			sep = " after "
		}
		fmt.Fprintf(&line, "%s%dk=%d", sep, (i+1)*SoakEvery/1000, s)
	}
	first, last := samples[0], samples[len(samples)-1]
	fmt.Fprintf(&line, " (growth %+d, margin %d; %d reloads of %d rules, %d allowed, %d denied)",
		int64(last)-int64(first), SoakMargin, SoakReloads, SoakRules, allowed, denied)
	t.Log(line.String())
	if allowed == 0 || denied == 0 {
		t.Errorf("%d allowed and %d denied: the soak must see both", allowed, denied)
	}
	if last > first+SoakMargin {
		t.Errorf("heap grew by %d bytes from %d to %d reloads, more than the margin of %d: replaced policies are kept", last-first, SoakEvery, SoakReloads, SoakMargin)
	}
	// Flat, not merely growing slowly: the heap does not rise at every
	// sample by more than noise.
	rising := true
	for i := 1; i < len(samples); i++ {
		rising = rising && samples[i] > samples[i-1]+SoakMargin/64
	}
	if rising {
		t.Errorf("heap rose at every sample: %v", samples)
	}
}
