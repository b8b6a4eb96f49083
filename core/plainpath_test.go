package core

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
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
			done := plain.decidePlain(plain.Policy(), now.UnixNano(), &req, 0, &d)
			if !done || d.NumTiers() != min(n, 4) {
				t.Fatalf("%d rules: decidePlain on existing buckets: done %v, %d tiers", n, done, d.NumTiers())
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

// TestPlainPathExactUnderContention races limiters of plain policies that
// share a memory store and a hot bucket: one rule alone (decideOne), the
// hot rule with a second (decideTiers locks one entry and writes the other
// by compare-and-swap), and with two more, while another goroutine makes
// buckets elsewhere (inserts and resizes). Time stands still, so the hot
// bucket admits exactly its burst, each other bucket at most its own, and
// what each holds afterwards is what was admitted through it.
func TestPlainPathExactUnderContention(t *testing.T) {
	s, err := NewMemoryStore(WithClock(NewManualClock(time.Unix(1_700_000_000, 0))), WithShards(2))
	if err != nil {
		t.Fatal(err)
	}
	hot := Rule{Name: "hot", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 400)}
	pair := Rule{Name: "pair", Scope: ScopeEndpoint, Limit: TokenBucket(PerHour(1), 120)}
	ip := Rule{Name: "ip", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 1000)}
	all := Rule{Name: "all", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 1000)}
	limiters := []*Limiter{
		newTestLimiter(t, []Option{WithStore(s)}, hot),
		newTestLimiter(t, []Option{WithStore(s)}, hot, pair),
		newTestLimiter(t, []Option{WithStore(s)}, ip, hot, all),
	}
	req := Request{User: "u", Endpoint: "GET /", IP: "192.0.2.1"}
	ctx := context.Background()
	var admitted [3]atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := limiters[g%3]
			for denied := 0; denied < 100; {
				var d Decision
				if err := l.Decide(ctx, &req, 1, &d); err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					denied++
					continue
				}
				admitted[g%3].Add(1)
			}
		}()
	}
	stop := churn(func(i int) {
		other := Request{User: "other-" + strconv.Itoa(i), Endpoint: "GET /", IP: "192.0.2.1"}
		var d Decision
		if err := limiters[1].Decide(ctx, &other, 0, &d); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	stop()
	one, two, three := admitted[0].Load(), admitted[1].Load(), admitted[2].Load()
	if one+two+three != 400 {
		t.Errorf("the hot bucket admitted %d (%d alone, %d with pair, %d with ip and all), want exactly its burst of 400", one+two+three, one, two, three)
	}
	if two > 120 {
		t.Errorf("the pair bucket admitted %d, more than its burst of 120", two)
	}
	d, err := limiters[2].Inspect(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := [3]int64{d.TierAt(0).Remaining, d.TierAt(1).Remaining, d.TierAt(2).Remaining}; got != [3]int64{1000 - three, 0, 1000 - three} {
		t.Errorf("ip, hot and all hold %v, want [%d 0 %d]", got, 1000-three, 1000-three)
	}
	d, err = limiters[1].Inspect(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.TierAt(1).Remaining; got != 120-two {
		t.Errorf("pair holds %d, want %d", got, 120-two)
	}
}

// TestPlainPathGlobalBucketDropped checks the plain path's memory of a
// global rule's bucket: after the store drops that bucket (Reset) or
// replaces it (the rule's limit changes), decisions are made on the bucket
// the table holds, and the plain path decides on it again.
func TestPlainPathGlobalBucketDropped(t *testing.T) {
	s, err := NewMemoryStore(WithClock(NewManualClock(time.Unix(1_700_000_000, 0))))
	if err != nil {
		t.Fatal(err)
	}
	user := Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 100)}
	global := Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 5)}
	l := newTestLimiter(t, []Option{WithStore(s)}, user, global)
	ctx := context.Background()
	decide := func(want int64) {
		t.Helper()
		var d Decision
		if err := l.Decide(ctx, &Request{User: "u"}, 1, &d); err != nil {
			t.Fatal(err)
		}
		if got := d.TierAt(1).Remaining; got != want || d.Allowed != (want >= 0 && d.TierAt(1).Allowed) {
			t.Fatalf("global holds %d after a decision (allowed %v), want %d", got, d.Allowed, want)
		}
	}
	for want := int64(4); want >= 2; want-- {
		decide(want)
	}
	if err := s.Reset(ctx, "global", "*"); err != nil {
		t.Fatal(err)
	}
	decide(4) // a new bucket, full before the decision
	decide(3)
	plainAgain := func() {
		t.Helper()
		var d Decision
		if !l.decidePlain(l.Policy(), l.memory.now(), &Request{User: "u"}, 0, &d) {
			t.Fatal("the plain path does not decide on the global bucket the table holds now")
		}
	}
	plainAgain()
	// Another fill time (10h, not 5h) replaces the bucket, keeping its
	// share: 2 of 5 taken is 4 of 10.
	global.Limit = TokenBucket(PerHour(1), 10)
	p, err := NewPolicy(user, global)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	var d Decision
	if err := l.Decide(ctx, &Request{User: "u"}, 1, &d); err != nil {
		t.Fatal(err)
	}
	if tier := d.TierAt(1); tier.Limit.Burst() != 10 || tier.Remaining != 5 {
		t.Fatalf("after the limit changed: global burst %d, %d left; want 10 and 5", tier.Limit.Burst(), tier.Remaining)
	}
	if err := l.Decide(ctx, &Request{User: "u"}, 1, &d); err != nil || d.TierAt(1).Remaining != 4 {
		t.Fatalf("the next decision: %d left, %v; want 4", d.TierAt(1).Remaining, err)
	}
	plainAgain()
}
