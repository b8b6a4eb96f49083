package core

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPlainPathSameAsGeneral compares, request by request, a limiter of a
// plain policy, which decides on the memory store through decideOne (one
// rule) or decidePlain (several), with one of the same rules and a disabled one, which is not
// plain and decides through the general path: random identities (some
// missing, some invalid), costs and times, on token buckets, a shaping
// limit and a window (which decidePlain leaves to the general path).
func TestPlainPathSameAsGeneral(t *testing.T) {
	rules := []Rule{
		{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(10), 5)},
		{Name: "per-ip", Scope: ScopeIP, Limit: Shaping(PerSecond(20), 4, 300*time.Millisecond)},
		{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(50), 8)},
		{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(100), 20)},
		{Name: "per-tenant", Scope: Dimension("tenant"), Limit: FixedWindow(30, time.Second)},
	}
	newLimiter := func(rules ...Rule) *Limiter {
		p, err := NewPolicy(rules...)
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewMemoryStore()
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLimiter(p, WithStore(s))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, n := range []int{1, 2, 3, 4, 5} {
		plain := newLimiter(rules[:n]...)
		general := newLimiter(append(rules[:n:n], Rule{Name: "off", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1), Disabled: true})...)
		if p := plain.Policy(); !p.plain || p.shadow || p.leased {
			t.Fatal("the first policy is not plain")
		}
		if general.Policy().plain {
			t.Fatal("the second policy is plain")
		}
		rng := uint64(n)
		next := func(k int) int { // xorshift, for a sequence every run repeats
			rng ^= rng << 13
			rng ^= rng >> 7
			rng ^= rng << 17
			return int(rng % uint64(k))
		}
		pick := func(vals ...string) string { return vals[next(len(vals))] }
		now := time.Unix(1_700_000_000, 0)
		for i := range 20_000 {
			req := Request{
				User:     pick("", "u1", "u2", "user:5f0c6a4e-8b1d-4c3a-9e2f-7a6b5c4d3e2f"),
				IP:       pick("", "192.0.2.7", "2001:db8::1"),
				Endpoint: pick("GET /items/{id}", "POST /items", ""),
				Dims:     []Dim{{Name: "tenant", Value: pick("acme", "", "globex")}},
			}
			if next(500) == 0 {
				req.User = "bad\x00user"
			}
			cost := int64(next(4))
			a, errA := plain.AllowAt(context.Background(), now, req, cost)
			b, errB := general.AllowAt(context.Background(), now, req, cost)
			if (errA == nil) != (errB == nil) || (errA != nil && errA.Error() != errB.Error()) {
				t.Fatalf("%d rules, request %d %+v cost %d: errors %v and %v", n, i, req, cost, errA, errB)
			}
			if !sameDecision(&a, &b) {
				t.Fatalf("%d rules, request %d %+v cost %d:\nplain   %+v %+v\ngeneral %+v %+v", n, i, req, cost, a, a.Tiers(), b, b.Tiers())
			}
			now = now.Add(time.Duration(next(30)) * time.Millisecond)
		}
		// The comparison says something of decidePlain only if it decides
		// the requests whose buckets exist; the window leaves them to the
		// general path.
		if n < 5 {
			req := Request{User: "u1", IP: "192.0.2.7", Endpoint: "GET /items/{id}"}
			var d Decision
			done, err := plain.decidePlain(plain.Policy(), now, &req, 0, &d)
			if !done || err != nil || d.NumTiers() != min(n, 4) {
				t.Fatalf("%d rules: decidePlain on existing buckets: done %v, %v, %d tiers", n, done, err, d.NumTiers())
			}
		}
	}
}

// TestPlainPathBadIdentity checks that decidePlain reports an invalid
// identity as the general path does, deciding nothing.
func TestPlainPathBadIdentity(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(10), 5)},
		Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(10), 5)},
	)
	d, err := l.Allow(context.Background(), Request{User: "a\nb"})
	if !errors.Is(err, ErrInvalidKey) || d.NumTiers() != 0 || d.Allowed {
		t.Fatalf("Allow of a bad identity = %+v, %v; want no decision and ErrInvalidKey", d, err)
	}
}
