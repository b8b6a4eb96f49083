package core

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestValuesOneSameAsValues formats random decisions under random header
// formats through HeaderValues.Format, which takes valuesOne's path when it
// can, and through values' alone, and compares every field: what valuesOne
// writes is what values would, and it declines what it does not cover
// (denials, several tiers, a shadow tier, a rule set not yet seen). It
// also checks that the decisions valuesOne covers were many.
func TestValuesOneSameAsValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	limits := []Limit{
		TokenBucket(PerSecond(10), 5),
		TokenBucket(Rate{N: 3, Per: time.Minute}, 3),
		TokenBucket(PerSecond(1_000_000_000), 1<<50), // a burst above 15 digits
		Shaping(PerSecond(5), 2, 700*time.Millisecond),
		FixedWindow(4, 2*time.Second),
		SlidingWindow(6, time.Second),
	}
	covered, total := 0, 0
	for round := range 400 {
		lim := limits[rng.IntN(len(limits))]
		rules := []Rule{{Name: "per-user", Scope: ScopeUser, Limit: lim, Shadow: rng.IntN(8) == 0}}
		if rng.IntN(3) == 0 {
			rules = append(rules, Rule{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(3), 5)})
		}
		l := newHdrLimiter(t, nil, rules...)
		// Each option is given to one format out of o.one.
		var opts []HeaderOption
		for _, o := range []struct {
			one int
			opt HeaderOption
		}{
			{4, WithXRateLimit(false)},
			{4, WithRateLimitPolicy(false)},
			{4, WithRateLimit(false)},
			{2, WithResetFormat(ResetDelta)},
			{2, WithRateLimitTiers(TiersAll)},
			{3, WithShadowTiers(true)},
		} {
			if rng.IntN(o.one) == 0 {
				opts = append(opts, o.opt)
			}
		}
		f := newHdrFormat(t, opts...)
		now := hdrT0.Add(time.Duration(rng.Int64N(int64(time.Hour))))
		for range 50 {
			now = now.Add(time.Duration(rng.Int64N(int64(400 * time.Millisecond))))
			req := hdrAlice
			if rng.IntN(10) == 0 {
				req.User = "" // no per-user tier
			}
			d, err := l.AllowAt(context.Background(), now, req, rng.Int64N(4))
			if err != nil {
				t.Fatal(err)
			}
			var fast, slow HeaderValues
			fast.Format(f, &d)
			var arr [maxInlineTiers]TierState
			f.values(&d, f.shown(&d, arr[:0]), d.At, &slow)
			var probe HeaderValues
			if f.valuesOne(&d, &probe) {
				covered++
			}
			total++
			if got, want := dumpValues(&fast), dumpValues(&slow); got != want {
				t.Fatalf("round %d, %+v under %d options:\nFormat: %s\nvalues: %s", round, d, len(opts), got, want)
			}
		}
	}
	if covered < total/4 {
		t.Errorf("valuesOne covered %d of %d decisions, want at least a quarter", covered, total)
	}
}

// dumpValues writes v's fields, each with whether it is a constant.
func dumpValues(v *HeaderValues) string {
	var b strings.Builder
	for i := range v.Len() {
		_, c := v.Constant(i)
		b.WriteString(v.Field(i).String())
		if c {
			b.WriteString(" (constant)")
		}
		b.WriteString(": ")
		b.Write(v.Bytes(i))
		b.WriteString("; ")
	}
	return b.String()
}
