package core

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
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
			// HeaderFormat.SetHeader, through setOne when it can, stores
			// what Format then HeaderValues.SetHeader store; the same
			// values are constant (shared) in both.
			names := &[NumHeaderFields]string{"L", "R", "S", "P", "RL", "RA", "CC"}
			h0 := map[string][]string{"R": {"old"}, "Other": {"kept"}}
			h1 := map[string][]string{"R": {"old"}, "Other": {"kept"}}
			f.SetHeader(h0, names, &d)
			slow.SetHeader(h1, names)
			if one, probe := f.setOne(map[string][]string{}, names, &d), (HeaderValues{}); one != f.valuesOne(&d, &probe) {
				t.Fatalf("round %d: setOne %v, valuesOne %v for %+v", round, one, !one, d)
			}
			if got, want := dumpMap(h0), dumpMap(h1); got != want {
				t.Fatalf("round %d, %+v under %d options:\nHeaderFormat.SetHeader: %s\nHeaderValues.SetHeader: %s", round, d, len(opts), got, want)
			}
			for i := range slow.Len() {
				// A constant is the format's own slice in both maps.
				name := names[slow.Field(i)]
				_, c := slow.Constant(i)
				if same := &h0[name][0] == &h1[name][0]; same != c {
					t.Fatalf("round %d: %s shared %v, constant %v", round, name, same, c)
				}
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

// dumpMap writes h's fields in name order, with each value's length and
// capacity.
func dumpMap(h map[string][]string) string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s: %q (len %d cap %d); ", k, h[k], len(h[k]), cap(h[k]))
	}
	return b.String()
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

// ceilUnix returns t as Unix seconds rounded up: what ceilUnixAfter
// computes, said through time.Time.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

// TestCeilUnixAfter compares ceilUnixAfter with ceilUnix(now.Add(d)) on
// random times (before and after 1970, with and without a monotonic
// reading) and durations of either sign.
func TestCeilUnixAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	base := []time.Time{time.Unix(0, 0), time.Unix(-1, 999_999_999), hdrT0, time.Now()}
	for i := range 200_000 {
		now := base[i%len(base)].Add(time.Duration(rng.Int64N(1<<62) - 1<<61))
		d := time.Duration(rng.Int64N(1<<62) - 1<<61)
		switch i % 4 {
		case 1:
			d %= 3 * time.Second
		case 2:
			now = now.Truncate(time.Second)
			d = d.Truncate(time.Second)
		}
		if got, want := ceilUnixAfter(now, d), ceilUnix(now.Add(d)); got != want {
			t.Fatalf("ceilUnixAfter(%v, %v) = %d, want %d", now, d, got, want)
		}
	}
}
