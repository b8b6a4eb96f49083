package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lkValid returns l validated, as a Lookup hands it out.
func lkValid(t testing.TB, l Limit) Limit {
	t.Helper()
	p, err := NewLimit(l)
	if err != nil {
		t.Fatal(err)
	}
	return *p
}

func TestNewLimit(t *testing.T) {
	p, err := NewLimit(TokenBucket(PerMinute(4), 4))
	if err != nil {
		t.Fatalf("NewLimit(4/min burst 4) error = %v", err)
	}
	if p.Burst() != 4 || p.Interval() != 15*time.Second || p.Window() != time.Minute {
		t.Errorf("NewLimit(4/min burst 4) = {Burst:%d Interval:%v Window:%v}, want {4 15s 1m0s}", p.Burst(), p.Interval(), p.Window())
	}
	q, _ := NewLimit(TokenBucket(PerMinute(4), 4))
	if p == q {
		t.Errorf("NewLimit returned the same pointer twice, want a copy each")
	}
	for _, tc := range []struct {
		name string
		l    Limit
		want error
	}{
		{"zero", Limit{}, ErrInvalidRule},
		{"zero rate", TokenBucket(PerSecond(0), 1), ErrInvalidRate},
		{"zero burst", TokenBucket(PerSecond(1), 0), ErrInvalidBurst},
		{"zero window", FixedWindow(1, 0), ErrInvalidWindow},
	} {
		if p, err := NewLimit(tc.l); p != nil || !errors.Is(err, tc.want) {
			t.Errorf("NewLimit(%s) = %v, %v; want nil, an error wrapping %v", tc.name, p, err, tc.want)
		}
	}
}

func TestLimitTableSetGetDeleteLen(t *testing.T) {
	tab := NewLimitTable()
	ctx := context.Background()
	small, big := TokenBucket(PerMinute(4), 4), TokenBucket(PerMinute(8), 8)
	window := FixedWindow(100, time.Hour)
	check := func(step, id string, want Limit, wantOK bool, wantLen int) {
		t.Helper()
		got, ok := tab.Get(id)
		if ok != wantOK || got != want {
			t.Errorf("%s: Get(%q) = %v, %v; want %v, %v", step, id, got, ok, want, wantOK)
		}
		p, ok, err := tab.Limit(ctx, id)
		if err != nil || ok != wantOK || (ok && *p != want) || (!ok && p != nil) {
			t.Errorf("%s: Limit(%q) = %v, %v, %v; want %v, %v, nil", step, id, p, ok, err, want, wantOK)
		}
		if n := tab.Len(); n != wantLen {
			t.Errorf("%s: Len() = %d, want %d", step, n, wantLen)
		}
	}
	check("empty", "acme", Limit{}, false, 0)
	if err := tab.Set("acme", small); err != nil {
		t.Fatal(err)
	}
	check("set acme", "acme", lkValid(t, small), true, 1)
	if err := tab.Set("beta", window); err != nil {
		t.Fatal(err)
	}
	check("set beta", "beta", lkValid(t, window), true, 2)
	if err := tab.Set("acme", big); err != nil {
		t.Fatal(err)
	}
	check("replace acme", "acme", lkValid(t, big), true, 2)
	tab.Delete("acme")
	check("delete acme", "acme", Limit{}, false, 1)
	tab.Delete("acme") // again: nothing to do
	tab.Delete("never-set")
	check("delete again", "beta", lkValid(t, window), true, 1)

	// Equal limits share one copy.
	if err := tab.Set("c1", big); err != nil {
		t.Fatal(err)
	}
	if err := tab.Set("c2", TokenBucket(PerMinute(8), 8)); err != nil {
		t.Fatal(err)
	}
	p1, _, _ := tab.Limit(ctx, "c1")
	p2, _, _ := tab.Limit(ctx, "c2")
	if p1 != p2 {
		t.Errorf("Limit(c1) = %p, Limit(c2) = %p: equal limits, want one copy", p1, p2)
	}
	// Identities are exact strings.
	check("case", "Beta", Limit{}, false, 3)
}

func TestLimitTableSetErrors(t *testing.T) {
	tab := NewLimitTable()
	ok := TokenBucket(PerMinute(4), 4)
	if err := tab.Set("acme", ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, id string
		l        Limit
		want     error
	}{
		{"empty identity", "", ok, ErrInvalidKey},
		{"control character", "ac\x00me", ok, ErrInvalidKey},
		{"newline", "acme\n", ok, ErrInvalidKey},
		{"too long", strings.Repeat("a", MaxKeyLen+1), ok, ErrInvalidKey},
		{"zero burst", "acme", TokenBucket(PerMinute(4), 0), ErrInvalidBurst},
		{"burst above MaxCost", "acme", TokenBucket(PerMinute(4), MaxCost+1), ErrInvalidBurst},
		{"zero window limit", "acme", FixedWindow(0, time.Minute), ErrInvalidBurst},
		{"zero rate", "acme", TokenBucket(PerMinute(0), 4), ErrInvalidRate},
		{"zero window", "acme", SlidingWindow(4, 0), ErrInvalidWindow},
		{"no limit", "acme", Limit{}, ErrInvalidRule},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tab.Set(tc.id, tc.l)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Set(%q, %v) error = %v, want one wrapping %v", tc.id, tc.l, err, tc.want)
			}
			if name := fmt.Sprintf("identity %q", tc.id); !strings.Contains(err.Error(), name) {
				t.Errorf("Set error %q does not name the %s", err, name)
			}
			// Nothing changed.
			if got, found := tab.Get("acme"); !found || got != lkValid(t, ok) || tab.Len() != 1 {
				t.Errorf("after the failed Set: Get(acme) = %v, %v, Len() = %d; want %v, true, 1", got, found, tab.Len(), ok)
			}
		})
	}
}

// lkTenant is a request of tenant on a Dimension rule.
func lkTenant(tenant string) Request {
	return Request{Dims: []Dim{{Name: "tenant", Value: tenant}}}
}

func TestLookupTableDecisions(t *testing.T) {
	tab := NewLimitTable()
	if err := tab.Set("acme", TokenBucket(PerMinute(10), 10)); err != nil {
		t.Fatal(err)
	}
	if err := tab.Set("beta", FixedWindow(3, time.Minute)); err != nil {
		t.Fatal(err)
	}
	fallback := TokenBucket(PerMinute(2), 2)
	l := newTestLimiter(t, nil,
		Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: fallback, Lookup: tab},
		Rule{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerMinute(100), 100)},
	)
	ctx := context.Background()
	acmeLimit, _, _ := tab.Limit(ctx, "acme")
	betaLimit, _, _ := tab.Limit(ctx, "beta")
	for i, tc := range []struct {
		tenant    string
		at        time.Duration
		allowed   bool
		limit     int64
		remaining int64
		retry     time.Duration
		fallback  bool // the rule's own Limit applies
	}{
		{"acme", 0, true, 10, 9, 0, false},
		{"acme", 0, true, 10, 8, 0, false},
		{"beta", 0, true, 3, 2, 0, false},
		{"gamma", 0, true, 2, 1, 0, true},
		{"gamma", 0, true, 2, 0, 0, true},
		{"gamma", 0, false, 2, 0, 30 * time.Second, true},
		{"beta", 0, true, 3, 1, 0, false},
		{"beta", 0, true, 3, 0, 0, false},
		{"beta", 0, false, 3, 0, time.Minute, false},
		{"acme", 6 * time.Second, true, 10, 8, 0, false},
	} {
		d, err := l.AllowAt(ctx, t0.Add(tc.at), lkTenant(tc.tenant), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != tc.allowed || d.Limit != tc.limit || d.Remaining != tc.remaining || d.RetryAfter != tc.retry || d.Rule != "per-tenant" {
			t.Errorf("step %d: AllowAt(t0+%v, %s, 1) = {Allowed:%v Rule:%q Limit:%d Remaining:%d RetryAfter:%v}, want {%v per-tenant %d %d %v}",
				i, tc.at, tc.tenant, d.Allowed, d.Rule, d.Limit, d.Remaining, d.RetryAfter, tc.allowed, tc.limit, tc.remaining, tc.retry)
		}
		ts, ok := d.Tier()
		if !ok || ts.Limit == nil {
			t.Fatalf("step %d: Tier() = %+v, %v; want the per-tenant tier with its Limit", i, ts, ok)
		}
		want := map[string]*Limit{"acme": acmeLimit, "beta": betaLimit, "gamma": &ts.Rule.Limit}[tc.tenant]
		if ts.Limit != want || ts.Limit.Burst() != tc.limit {
			t.Errorf("step %d: %s: TierState.Limit = %p (%v), want %p (%v)", i, tc.tenant, ts.Limit, ts.Limit, want, want)
		}
		if tc.fallback && *ts.Limit != lkValid(t, fallback) {
			t.Errorf("step %d: %s: TierState.Limit = %v, want the rule's %v", i, tc.tenant, ts.Limit, fallback)
		}
	}
	// A request with no tenant skips the rule, lookup or not.
	d, err := l.AllowAt(ctx, t0, Request{IP: "192.0.2.1"}, 1)
	if err != nil || !d.Allowed || d.Rule != "per-ip" || len(d.Tiers()) != 1 {
		t.Errorf("AllowAt(t0, no tenant, 1) = %+v, %v; want allowed by per-ip alone", d, err)
	}
}

// TestLookupLimitChangeKeepsBucket: a tenant whose limit changes keeps its
// bucket (the same rule and identity). The two limits fill in the same time
// (tau = burst * interval: 4 * 15s = 8 * 7.5s = 60s), and the changes
// happen only to an empty bucket or a full one, so the answers below hold
// whatever rule rescales a bucket (the same time to full, the same share of
// the burst, the same tokens refilled at the new rate); a bucket started
// afresh would answer otherwise.
func TestLookupLimitChangeKeepsBucket(t *testing.T) {
	small, big := TokenBucket(PerMinute(4), 4), TokenBucket(PerMinute(8), 8)
	if s, b := lkValid(t, small), lkValid(t, big); s.Window() != time.Minute || b.Window() != time.Minute {
		t.Fatalf("fill times %v and %v, want 1m0s both", s.Window(), b.Window())
	}
	tab := NewLimitTable()
	l := newTestLimiter(t, nil, Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: TokenBucket(PerMinute(1), 1), Lookup: tab})
	for i, s := range []struct {
		at        time.Duration
		set       *Limit
		allowed   bool
		limit     int64
		remaining int64
		retry     time.Duration
	}{
		{0, &small, true, 4, 3, 0},
		{0, nil, true, 4, 2, 0},
		{0, nil, true, 4, 1, 0},
		{0, nil, true, 4, 0, 0},
		{0, nil, false, 4, 0, 15 * time.Second},
		// Upgraded while empty: still empty, a token every 7.5s now.
		{0, &big, false, 8, 0, 7500 * time.Millisecond},
		// Half the fill time later, half the burst.
		{30 * time.Second, nil, true, 8, 3, 0},
		{30 * time.Second, nil, true, 8, 2, 0},
		{30 * time.Second, nil, true, 8, 1, 0},
		{30 * time.Second, nil, true, 8, 0, 0},
		{30 * time.Second, nil, false, 8, 0, 7500 * time.Millisecond},
		// Downgraded while empty: still empty, a token every 15s.
		{30 * time.Second, &small, false, 4, 0, 15 * time.Second},
		// Full one fill time after it was emptied.
		{90 * time.Second, nil, true, 4, 3, 0},
		// Upgraded while full (a full bucket is the same as none, DESIGN.md
		// section 5): full at the new burst.
		{150 * time.Second, &big, true, 8, 7, 0},
	} {
		if s.set != nil {
			if err := tab.Set("acme", *s.set); err != nil {
				t.Fatal(err)
			}
		}
		d, err := l.AllowAt(context.Background(), t0.Add(s.at), lkTenant("acme"), 1)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != s.allowed || d.Limit != s.limit || d.Remaining != s.remaining || d.RetryAfter != s.retry {
			t.Errorf("step %d: AllowAt(t0+%v, acme, 1) = {Allowed:%v Limit:%d Remaining:%d RetryAfter:%v}, want {%v %d %d %v}",
				i, s.at, d.Allowed, d.Limit, d.Remaining, d.RetryAfter, s.allowed, s.limit, s.remaining, s.retry)
		}
		if ts := d.Tiers(); len(ts) != 1 || ts[0].Limit.Burst() != s.limit {
			t.Errorf("step %d: Tiers() = %+v, want one tier of burst %d", i, ts, s.limit)
		}
	}
}

var errLkBackend = errors.New("tenant service down")

type lkCtxKey struct{}

func TestLookupFunc(t *testing.T) {
	var calls atomic.Int64
	fn := LookupFunc(func(ctx context.Context, id string) (Limit, bool, error) {
		calls.Add(1)
		if ctx.Value(lkCtxKey{}) != "request ctx" {
			return Limit{}, false, fmt.Errorf("lookup got another context")
		}
		switch id {
		case "acme":
			return TokenBucket(PerMinute(10), 10), true, nil
		case "acme-too":
			return TokenBucket(PerMinute(10), 10), true, nil
		case "down":
			return Limit{}, false, fmt.Errorf("tenant %q: %w", id, errLkBackend)
		case "zero-burst":
			return TokenBucket(PerMinute(10), 0), true, nil
		case "zero-rate":
			return TokenBucket(PerMinute(0), 10), true, nil
		case "no-limit":
			return Limit{}, true, nil
		case "ignored":
			// ok false: the limit returned is not used, even if invalid.
			return TokenBucket(PerMinute(0), 0), false, nil
		}
		return Limit{}, false, nil
	})
	l := newTestLimiter(t, nil,
		Rule{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerMinute(100), 100)},
		Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: TokenBucket(PerMinute(2), 2), Lookup: fn},
	)
	ctx := context.WithValue(context.Background(), lkCtxKey{}, "request ctx")
	req := func(tenant string) Request {
		r := lkTenant(tenant)
		r.IP = "192.0.2.1"
		return r
	}
	// Limits from the function, and the fallback.
	for _, tc := range []struct {
		tenant           string
		limit, remaining int64
	}{
		{"acme", 10, 9},
		{"acme-too", 10, 9},
		{"other", 2, 1},
		{"ignored", 2, 1},
	} {
		d, err := l.AllowAt(ctx, t0, req(tc.tenant), 1)
		ts, _ := d.Tier()
		if err != nil || !d.Allowed || d.Rule != "per-tenant" || d.Limit != tc.limit || d.Remaining != tc.remaining || ts.Limit.Burst() != tc.limit {
			t.Errorf("AllowAt(t0, %s, 1) = {Allowed:%v Rule:%q Limit:%d Remaining:%d}, %v; want {true per-tenant %d %d}, nil",
				tc.tenant, d.Allowed, d.Rule, d.Limit, d.Remaining, err, tc.limit, tc.remaining)
		}
	}
	// Failures fail the decision, naming the rule, and take nothing from
	// the other tier, decided before in policy order.
	for _, tc := range []struct {
		tenant string
		want   error
		in     []string
	}{
		{"down", errLkBackend, []string{`rule "per-tenant"`, "limit lookup", `tenant "down"`, "tenant service down"}},
		{"zero-burst", ErrInvalidBurst, []string{`rule "per-tenant"`, `identity "zero-burst"`}},
		{"zero-rate", ErrInvalidRate, []string{`rule "per-tenant"`, `identity "zero-rate"`}},
		{"no-limit", ErrInvalidRule, []string{`rule "per-tenant"`, `identity "no-limit"`}},
	} {
		d, err := l.AllowAt(ctx, t0, req(tc.tenant), 1)
		if !errors.Is(err, tc.want) || d.Allowed {
			t.Errorf("AllowAt(t0, %s, 1) = {Allowed:%v}, %v; want denied, an error wrapping %v", tc.tenant, d.Allowed, err, tc.want)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "ratelimit: ") {
			t.Errorf("AllowAt(t0, %s, 1) error %q does not start with \"ratelimit: \"", tc.tenant, msg)
		}
		for _, s := range tc.in {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("AllowAt(t0, %s, 1) error %q does not say %q", tc.tenant, err, s)
			}
		}
	}
	// per-ip: 4 allowed requests took 4; the 4 failed ones nothing.
	if d, err := l.AllowAt(ctx, t0, Request{IP: "192.0.2.1"}, 0); err != nil || d.Remaining != 96 {
		t.Errorf("per-ip Remaining = %d, %v; want 96, nil", d.Remaining, err)
	}

	// Equal limits share one copy across calls and identities, which the
	// Redis stores rely on to reuse encoded arguments.
	p1, ok1, err1 := fn.Limit(ctx, "acme")
	p2, ok2, err2 := fn.Limit(ctx, "acme-too")
	p3, _, _ := fn.Limit(ctx, "acme")
	if err1 != nil || err2 != nil || !ok1 || !ok2 {
		t.Fatalf("Limit(acme), Limit(acme-too) = %v, %v, %v; %v, %v, %v", p1, ok1, err1, p2, ok2, err2)
	}
	if p1 != p2 || p1 != p3 {
		t.Errorf("Limit(acme), Limit(acme-too), Limit(acme) = %p, %p, %p; want one pointer", p1, p2, p3)
	}
	if *p1 != lkValid(t, TokenBucket(PerMinute(10), 10)) {
		t.Errorf("Limit(acme) = %v, want 10/min burst 10, validated", p1)
	}
	d1, _ := l.AllowAt(ctx, t0, req("acme"), 1)
	d2, _ := l.AllowAt(ctx, t0, req("acme-too"), 1)
	ts1, _ := d1.Tier()
	ts2, _ := d2.Tier()
	if ts1.Limit != ts2.Limit || ts1.Limit != p1 {
		t.Errorf("TierState.Limit of acme, acme-too = %p, %p; want %p both", ts1.Limit, ts2.Limit, p1)
	}
	// Not found: nil and false; no error.
	if p, ok, err := fn.Limit(ctx, "other"); p != nil || ok || err != nil {
		t.Errorf("Limit(other) = %v, %v, %v; want nil, false, nil", p, ok, err)
	}
	if calls.Load() == 0 {
		t.Error("the function was never called")
	}
}

// lkBadLookup returns limits no NewLimit made.
type lkBadLookup struct{ l *Limit }

func (b lkBadLookup) Limit(context.Context, string) (*Limit, bool, error) { return b.l, true, nil }

func TestLookupUnvalidatedLimit(t *testing.T) {
	raw := TokenBucket(PerMinute(10), 10) // never validated: no interval
	for _, tc := range []struct {
		name string
		lk   Lookup
	}{
		{"unvalidated", lkBadLookup{&raw}},
		{"nil limit", lkBadLookup{nil}},
		{"zero limit", lkBadLookup{&Limit{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newTestLimiter(t, nil, Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: TokenBucket(PerMinute(2), 2), Lookup: tc.lk})
			d, err := l.AllowAt(context.Background(), t0, lkTenant("acme"), 1)
			if !errors.Is(err, ErrInvalidRule) || d.Allowed {
				t.Fatalf("AllowAt = {Allowed:%v}, %v; want denied, an error wrapping ErrInvalidRule", d.Allowed, err)
			}
			for _, s := range []string{`rule "per-tenant"`, `"acme"`, "NewLimit"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
		})
	}
}

// TestLimitTableConcurrent: goroutines decide while others change the
// table. The hot tenant's limit flips between a table entry and the rule's
// fallback, equal in numbers, so exactly the burst gets in at one instant
// however the changes interleave; the other tenants' limits churn.
func TestLimitTableConcurrent(t *testing.T) {
	const burst = 50
	lim := TokenBucket(PerHour(1), burst)
	tab := NewLimitTable()
	if err := tab.Set("hot", lim); err != nil {
		t.Fatal(err)
	}
	l := newTestLimiter(t, nil, Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: lim, Lookup: tab})
	ctx := context.Background()
	const deciders, tries = 8, 40
	var (
		admitted, wrongLimit atomic.Int64
		deciding, changing   sync.WaitGroup
		stop                 atomic.Bool
	)
	for g := range 3 {
		changing.Add(1)
		go func() {
			defer changing.Done()
			for i := 0; !stop.Load(); i++ {
				switch g {
				case 0:
					if i%2 == 0 {
						tab.Delete("hot")
					} else if err := tab.Set("hot", lim); err != nil {
						t.Error(err)
						return
					}
				case 1:
					id := fmt.Sprintf("churn-%d", i%64)
					if i%3 == 0 {
						tab.Delete(id)
					} else if err := tab.Set(id, TokenBucket(PerMinute(int64(1+i%7)), int64(1+i%5))); err != nil {
						t.Error(err)
						return
					}
				case 2:
					tab.Len()
					tab.Get("hot")
					tab.Get(fmt.Sprintf("churn-%d", i%64))
				}
				if i%64 == 0 {
					runtime.Gosched()
				}
			}
		}()
	}
	for g := range deciders {
		deciding.Add(1)
		go func() {
			defer deciding.Done()
			for i := range tries {
				d, err := l.AllowAt(ctx, t0, lkTenant("hot"), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
				if d.Limit != burst {
					wrongLimit.Add(1)
				}
				// Churning tenants decide too, on their own buckets.
				if _, err := l.AllowAt(ctx, t0, lkTenant(fmt.Sprintf("churn-%d", (g*tries+i)%64)), 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	deciding.Wait()
	stop.Store(true)
	changing.Wait()
	if n := admitted.Load(); n != burst {
		t.Errorf("%d goroutines x %d AllowAt(t0, hot, 1): %d admitted, want exactly %d", deciders, tries, n, burst)
	}
	if n := wrongLimit.Load(); n != 0 {
		t.Errorf("%d decisions reported a Limit other than %d", n, burst)
	}
}

func TestLookupTableDecideAllocs(t *testing.T) {
	tab := NewLimitTable()
	big := TokenBucket(PerSecond(1<<20), 1<<30)
	if err := tab.Set("acme", big); err != nil {
		t.Fatal(err)
	}
	l := newTestLimiter(t, nil,
		Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: big, Lookup: tab},
		Rule{Name: "per-ip", Scope: ScopeIP, Limit: big, Lookup: tab, Routes: []string{"GET /x"}},
	)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"in the table", lkTenant("acme")},
		{"fallback", lkTenant("beta")},
		{"two tiers, one in the table", Request{Dims: []Dim{{Name: "tenant", Value: "acme"}}, IP: "192.0.2.1", Method: "GET", Route: "/x"}},
	} {
		l.Allow(ctx, tc.req) // create the buckets
		if got := testing.AllocsPerRun(100, func() { l.Allow(ctx, tc.req) }); got != 0 {
			t.Errorf("%s: Allow makes %v allocations, want 0", tc.name, got)
		}
	}
}

// lkInterned returns the number of limits the table's intern map holds.
func lkInterned(tab *LimitTable) int {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	return len(tab.intern)
}

// lkCollect runs the garbage collector until the table's intern map holds
// want limits, or gives up; cleanups run after a collection, on their own
// goroutine.
func lkCollect(tab *LimitTable, want int) int {
	n := lkInterned(tab)
	for i := 0; i < 200 && n != want; i++ {
		runtime.GC()
		runtime.Gosched()
		n = lkInterned(tab)
	}
	return n
}

// TestLimitTableForgetsUnusedLimits: the intern map keeps no limit that no
// identity uses any more, while limits in use keep one shared copy.
func TestLimitTableForgetsUnusedLimits(t *testing.T) {
	tab := NewLimitTable()
	const n = 100
	common := TokenBucket(PerHour(1000), 1000)
	for i := range n {
		if err := tab.Set(fmt.Sprintf("t%d", i), TokenBucket(PerHour(int64(i+1)), 10)); err != nil {
			t.Fatal(err)
		}
	}
	if got := lkInterned(tab); got != n {
		t.Fatalf("after %d distinct Sets the intern map holds %d limits, want %d", n, got, n)
	}
	// Every tenant moves to one plan: the 100 old limits are unused.
	for i := range n {
		if err := tab.Set(fmt.Sprintf("t%d", i), common); err != nil {
			t.Fatal(err)
		}
	}
	if got := lkCollect(tab, 1); got != 1 {
		t.Fatalf("after every identity moved to one limit and GC, the intern map holds %d limits, want 1", got)
	}
	// The limit in use is still shared.
	if err := tab.Set("new", common); err != nil {
		t.Fatal(err)
	}
	p0, _, _ := tab.Limit(context.Background(), "t0")
	pn, _, _ := tab.Limit(context.Background(), "new")
	if p0 != pn || *p0 != lkValid(t, common) {
		t.Errorf("Limit(t0) = %p, Limit(new) = %p after GC; want one copy of %v", p0, pn, common)
	}
	// Deleted identities keep nothing either.
	for i := range n {
		tab.Delete(fmt.Sprintf("t%d", i))
	}
	tab.Delete("new")
	if got := lkCollect(tab, 0); got != 0 {
		t.Fatalf("after every identity was deleted and GC, the intern map holds %d limits, want 0", got)
	}
	if tab.Len() != 0 {
		t.Errorf("Len() = %d, want 0", tab.Len())
	}
	// And the table works as before.
	if err := tab.Set("again", common); err != nil {
		t.Fatal(err)
	}
	if got, ok := tab.Get("again"); !ok || got != lkValid(t, common) || lkInterned(tab) != 1 {
		t.Errorf("Get(again) = %v, %v with %d interned; want %v, true, 1", got, ok, lkInterned(tab), common)
	}
}
