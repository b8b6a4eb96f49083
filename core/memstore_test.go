package core

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryStoreExactUnderContention: one-bucket takes (the
// compare-and-swap path) and two-bucket takes (the locking path) race on one
// hot bucket while other goroutines insert, reclaim, read and reset other
// keys. Time stands still, so the hot bucket admits exactly its burst:
// every token goes to exactly one take, and the second bucket of the
// two-bucket takes admits no more than its own burst.
func TestMemoryStoreExactUnderContention(t *testing.T) {
	clock := NewManualClock(time.Unix(1_700_000_000, 0))
	s, err := NewMemoryStore(WithClock(clock), WithShards(4))
	if err != nil {
		t.Fatal(err)
	}
	hot := TokenBucket(PerHour(1), 500)
	pair := TokenBucket(PerHour(1), 150)
	win := FixedWindow(1000, time.Hour)
	for _, l := range []*Limit{&hot, &pair, &win} {
		if err := l.validate(); err != nil {
			t.Fatal(err)
		}
	}
	var singles, pairs, wins atomic.Int64
	var wg sync.WaitGroup
	take := func(tk *Take) bool {
		t.Helper()
		if err := s.Take(context.Background(), tk); err != nil {
			t.Error(err)
			return false
		}
		ok := true
		for _, st := range tk.States {
			ok = ok && st.Allowed
		}
		return ok
	}
	const workers = 8
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for denied := 0; denied < 200; {
				var tk *Take
				switch g % 3 {
				case 0:
					tk = &Take{Cost: 1, Buckets: []Bucket{{Rule: "hot", Key: "k", Limit: &hot}}, States: make([]BucketState, 1)}
				case 1:
					tk = &Take{Cost: 1, Buckets: []Bucket{{Rule: "pair", Key: "k", Limit: &pair}, {Rule: "hot", Key: "k", Limit: &hot}}, States: make([]BucketState, 2)}
				default:
					tk = &Take{Cost: 1, Buckets: []Bucket{{Rule: "hot", Key: "k", Limit: &hot}, {Rule: "win", Key: "k", Limit: &win}}, States: make([]BucketState, 2)}
				}
				if !take(tk) {
					denied++
					continue
				}
				switch g % 3 {
				case 0:
					singles.Add(1)
				case 1:
					pairs.Add(1)
				default:
					wins.Add(1)
				}
			}
		}()
	}
	// Churn elsewhere: new keys (inserts, resizes), reads, resets, reclaims.
	stop := churn(func(i int) {
		key := "other-" + strconv.Itoa(i)
		take(&Take{Cost: 1, Buckets: []Bucket{{Rule: "hot", Key: key, Limit: &hot}}, States: make([]BucketState, 1)})
		take(&Take{Cost: 0, Buckets: []Bucket{{Rule: "hot", Key: "k", Limit: &hot}, {Rule: "pair", Key: key, Limit: &pair}}, States: make([]BucketState, 2)})
		if i%7 == 0 {
			if err := s.Reset(context.Background(), "hot", "other-"+strconv.Itoa(i/2)); err != nil {
				t.Error(err)
			}
			s.Reclaim()
			_ = s.Stats()
		}
	})
	wg.Wait()
	stop()
	if got := singles.Load() + pairs.Load() + wins.Load(); got != 500 {
		t.Errorf("the hot bucket admitted %d (%d alone, %d with pair, %d with win), want exactly its burst of 500", got, singles.Load(), pairs.Load(), wins.Load())
	}
	if pairs.Load() > 150 {
		t.Errorf("the pair bucket admitted %d, more than its burst of 150", pairs.Load())
	}
	// The buckets hold what was taken: a read sees none left in the hot one.
	tk := &Take{Buckets: []Bucket{{Rule: "hot", Key: "k", Limit: &hot}, {Rule: "pair", Key: "k", Limit: &pair}, {Rule: "win", Key: "k", Limit: &win}}, States: make([]BucketState, 3)}
	take(tk)
	if tk.States[0].Remaining != 0 || tk.States[1].Remaining != 150-pairs.Load() || tk.States[2].Remaining != 1000-wins.Load() {
		t.Errorf("after the race: remaining %d/%d/%d, want 0/%d/%d", tk.States[0].Remaining, tk.States[1].Remaining, tk.States[2].Remaining, 150-pairs.Load(), 1000-wins.Load())
	}
}

// TestMemoryStoreLimitChangeUnderContention: takes of one bucket under two
// limits with the same burst and different rates race, so that entries are
// replaced while others decide on them. Time stands still and a changed
// limit keeps the bucket's share, so no more than the burst is admitted,
// and the store's rounding (up, never down) loses at most a few tokens.
func TestMemoryStoreLimitChangeUnderContention(t *testing.T) {
	clock := NewManualClock(time.Unix(1_700_000_000, 0))
	s, err := NewMemoryStore(WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	a, b := TokenBucket(PerHour(100), 100), TokenBucket(PerMinute(100), 100)
	for _, l := range []*Limit{&a, &b} {
		if err := l.validate(); err != nil {
			t.Fatal(err)
		}
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := &a
			if g%2 == 1 {
				l = &b
			}
			for denied := 0; denied < 100; {
				tk := &Take{Cost: 1, Buckets: []Bucket{{Rule: "r", Key: "k", Limit: l}}, States: make([]BucketState, 1)}
				if err := s.Take(context.Background(), tk); err != nil {
					t.Error(err)
					return
				}
				if tk.States[0].Allowed {
					admitted.Add(1)
				} else {
					denied++
				}
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n > 100 || n < 95 {
		t.Errorf("admitted %d under two limits of burst 100, want 95 to 100", n)
	}
	if k := s.Stats().Keys; k != 1 {
		t.Errorf("Stats().Keys = %d after the race, want 1: a replaced entry is dropped", k)
	}
}

// boundWatchdog is how long the bound tests give decisions that would
// otherwise never return.
const boundWatchdog = 30 * time.Second

// finishes runs f and fails t if it has not returned within boundWatchdog.
func finishes(t *testing.T, what string, s *MemoryStore, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(boundWatchdog):
		t.Fatalf("%s did not return within %v (%d evictions so far)", what, boundWatchdog, s.Stats().Evictions)
	}
}

// TestMemoryStoreBoundBelowTiers: a store bounded below the number of tiers
// a request touches still decides it: a take's own new buckets are never
// evicted to make room for its others. Time stands still, so one identity
// gets exactly the burst; new identities each leave the store at most the
// buckets of one decision.
func TestMemoryStoreBoundBelowTiers(t *testing.T) {
	ctx := context.Background()
	for _, maxKeys := range []int{1, 2, 3} {
		t.Run(strconv.Itoa(maxKeys), func(t *testing.T) {
			s, err := NewMemoryStore(WithMaxKeys(maxKeys))
			if err != nil {
				t.Fatal(err)
			}
			l := newTestLimiter(t, []Option{WithStore(s)},
				Rule{Name: "user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 5)},
				Rule{Name: "ip", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 5)},
				Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 1000)})
			admitted := 0
			finishes(t, "AllowAt on three tiers", s, func() {
				for range 10 {
					if d, err := l.AllowAt(ctx, t0, Request{User: "u", IP: "192.0.2.1"}, 1); err == nil && d.Allowed {
						admitted++
					}
				}
			})
			if admitted != 5 {
				t.Errorf("one identity, 10 requests at t0: %d admitted, want the burst of 5", admitted)
			}
			finishes(t, "AllowAt on new identities", s, func() {
				for i := range 200 {
					req := Request{User: "u" + strconv.Itoa(i), IP: "198.51.100." + strconv.Itoa(i%7)}
					if _, err := l.AllowAt(ctx, t0, req, 1); err != nil {
						t.Error(err)
						return
					}
					if k := s.Stats().Keys; k > max(maxKeys, 3) {
						t.Errorf("request %d: Stats().Keys = %d, want at most %d", i, k, max(maxKeys, 3))
						return
					}
				}
			})
		})
	}
}

// TestMemoryStoreBoundUnderContention: decisions on new keys race on a
// store bounded to fewer buckets than they use together, each insertion
// evicting another's bucket. A bucket a decision has just created is never
// dropped for another's, so every decision returns, and inserts each of
// its buckets once: time stands still, so none is reclaimed, and every
// bucket ever inserted is held or evicted. Decisions after the race bring
// the store back to its bound.
func TestMemoryStoreBoundUnderContention(t *testing.T) {
	ctx := context.Background()
	const (
		maxKeys    = 2
		goroutines = 4
		requests   = 2000 // each goroutine's
		late       = 8
	)
	// One shard per rule: every insertion samples the others' buckets.
	s, err := NewMemoryStore(WithMaxKeys(maxKeys), WithShards(1))
	if err != nil {
		t.Fatal(err)
	}
	l := newTestLimiter(t, []Option{WithStore(s)},
		Rule{Name: "user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 100_000)},
		Rule{Name: "ip", Scope: ScopeIP, Limit: TokenBucket(PerSecond(1), 100_000)})
	allow := func(req Request) {
		if d, err := l.AllowAt(ctx, t0, req, 1); err != nil || !d.Allowed {
			t.Errorf("AllowAt(t0, %+v) = %v, %v; want allowed", req, d.Allowed, err)
		}
	}
	finishes(t, "racing AllowAt", s, func() {
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range requests {
					id := strconv.Itoa(g) + "-" + strconv.Itoa(i)
					allow(Request{User: "u" + id, IP: "ip" + id})
				}
			}()
		}
		wg.Wait()
	})
	for i := range late {
		allow(Request{User: "late" + strconv.Itoa(i), IP: "late" + strconv.Itoa(i)})
	}
	st := s.Stats()
	if inserted := int64(2 * (goroutines*requests + late)); st.Reclaimed != 0 || int64(st.Keys)+st.Evictions != inserted {
		t.Errorf("Stats() = %+v: want none reclaimed, held + evicted = the %d buckets inserted once each", st, inserted)
	}
	if st.Keys != maxKeys {
		t.Errorf("after %d decisions on new keys: Stats().Keys = %d, want the bound, %d", late, st.Keys, maxKeys)
	}
}

// TestTiersAllocs: a decision on up to eight tiers, on existing buckets of
// the memory store, allocates nothing: the tiers live on the stack and in
// the Decision.
func TestTiersAllocs(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		var rules []Rule
		for i := range n {
			rules = append(rules, Rule{Name: "r" + strconv.Itoa(i), Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
		}
		l := newTestLimiter(t, nil, rules...)
		ctx := context.Background()
		req := Request{User: "alice"}
		d, _ := l.Allow(ctx, req)
		if d.NumTiers() != n {
			t.Fatalf("%d rules: %d tiers", n, d.NumTiers())
		}
		if got := testing.AllocsPerRun(100, func() { l.Allow(ctx, req) }); got != 0 {
			t.Errorf("%d tiers: Allow makes %v allocations, want 0", n, got)
		}
		if got := testing.AllocsPerRun(100, func() { l.Decide(ctx, &req, 1, &d) }); got != 0 {
			t.Errorf("%d tiers: Decide makes %v allocations, want 0", n, got)
		}
	}
}

// TestSharedPolicyAllocs: one policy shared by two limiters, each on a
// memory store of its own (NewLimiter's default), decides in alternation
// without allocating, and each store keeps its own buckets.
func TestSharedPolicyAllocs(t *testing.T) {
	for _, n := range []int{1, 3} {
		var rules []Rule
		for i := range n {
			rules = append(rules, Rule{Name: "r" + strconv.Itoa(i), Scope: ScopeUser, Limit: TokenBucket(PerMinute(1), 1000)})
		}
		a := newTestLimiter(t, nil, rules...)
		b, err := NewLimiter(a.Policy())
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		req := Request{User: "alice"}
		var d Decision
		both := func() {
			a.Decide(ctx, &req, 1, &d)
			b.Decide(ctx, &req, 1, &d)
		}
		both()
		if got := testing.AllocsPerRun(100, both); got != 0 {
			t.Errorf("%d rules: two limiters in alternation make %v allocations, want 0", n, got)
		}
		// a took twice from b's decisions: 1 (first) + 101 (AllocsPerRun's
		// warm-up and runs) + 1, each store on its own.
		if err := a.Decide(ctx, &req, 1, &d); err != nil || d.Remaining != 1000-103 {
			t.Errorf("%d rules: a's bucket after 103 takes has %d left (%v), want %d", n, d.Remaining, err, 1000-103)
		}
	}
}

// TestDecisionTiers: the tiers a Decision holds, inline up to eight and
// beyond, read back through TierAt and Tiers as decided.
func TestDecisionTiers(t *testing.T) {
	for _, n := range []int{1, 8, 9} {
		var rules []Rule
		for i := range n {
			rules = append(rules, Rule{Name: "r" + strconv.Itoa(i), Scope: ScopeUser, Limit: TokenBucket(PerHour(1), int64(10+i)), Shadow: i == 1})
		}
		l := newTestLimiter(t, nil, rules...)
		d, _ := l.Allow(context.Background(), Request{User: "alice"})
		tiers := d.Tiers()
		if len(tiers) != n || d.NumTiers() != n {
			t.Fatalf("%d rules: Tiers() has %d, NumTiers() %d", n, len(tiers), d.NumTiers())
		}
		for i, ts := range tiers {
			if ts != d.TierAt(i) || ts.Rule.Name != "r"+strconv.Itoa(i) || !ts.Allowed || ts.Remaining != int64(9+i) || ts.Shadow != (i == 1) || ts.Limit.Burst() != int64(10+i) {
				t.Errorf("%d rules: tier %d = %+v", n, i, ts)
			}
		}
		if z := d.TierAt(n); z != (TierState{}) {
			t.Errorf("TierAt(%d) = %+v, want the zero TierState", n, z)
		}
	}
}

// TestMemoryStoreFastPathsSameAsLocked: the same random takes, of one to
// four buckets under token bucket and shaping limits that change now and
// then (so that entries are replaced), on two stores with one clock: one
// through Take, which decides on existing entries by compare-and-swap
// (takeFast, takeFastMany), the other always through takeLocked. Every
// state must be the same.
func TestMemoryStoreFastPathsSameAsLocked(t *testing.T) {
	clock := NewManualClock(time.Unix(1_700_000_000, 0))
	newStore := func() *MemoryStore {
		s, err := NewMemoryStore(WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	fast, locked := newStore(), newStore()
	limits := []Limit{TokenBucket(PerSecond(10), 5), TokenBucket(PerSecond(20), 5), Shaping(PerSecond(10), 3, 200*time.Millisecond), TokenBucket(PerMinute(30), 2)}
	for i := range limits {
		if err := limits[i].validate(); err != nil {
			t.Fatal(err)
		}
	}
	rules, keys := []string{"a", "b", "c", "d"}, []string{"k1", "k2"}
	rng := uint64(1)
	next := func(n int) int { // xorshift, for a sequence every run repeats
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	for i := range 5000 {
		n := 1 + next(4)
		start := next(len(rules))
		buckets := make([]Bucket, n)
		for j := range buckets {
			// Distinct rules, so a take never names a bucket twice; the
			// limit changes rarely, as a policy would.
			lim := &limits[(start+j+i/500)%len(limits)]
			if next(50) == 0 {
				lim = &limits[next(len(limits))]
			}
			buckets[j] = Bucket{Rule: rules[(start+j)%len(rules)], Key: keys[next(len(keys))], Limit: lim}
		}
		cost := int64(next(3))
		a := &Take{Cost: cost, Buckets: buckets, States: make([]BucketState, n)}
		b := &Take{Cost: cost, Buckets: buckets, States: make([]BucketState, n)}
		if err := fast.Take(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		locked.takeLocked(b, nil, clock.Now().UnixNano())
		for j := range a.States {
			if a.States[j] != b.States[j] {
				t.Fatalf("take %d, bucket %d of %v, cost %d: Take says %+v, takeLocked %+v", i, j, buckets, cost, a.States[j], b.States[j])
			}
		}
		clock.Advance(time.Duration(next(40)) * time.Millisecond)
	}
	// The comparison above says something of takeFastMany only if it
	// decides the common case: takes on existing token buckets under the
	// limits they were written under (here, read without consuming).
	for _, n := range []int{2, 4} {
		buckets := make([]Bucket, n)
		for j := range buckets {
			buckets[j] = Bucket{Rule: "e" + strconv.Itoa(j), Key: "k", Limit: &limits[0]}
		}
		write := &Take{Cost: 1, Buckets: buckets, States: make([]BucketState, n)}
		fast.takeLocked(write, nil, clock.Now().UnixNano())
		if !fast.takeFastMany(nil, buckets, make([]BucketState, n), clock.Now().UnixNano(), 0) {
			t.Errorf("takeFastMany refused %d existing token buckets", n)
		}
	}
}

// churn calls step with 0, 1, 2 and on in a goroutine of its own until the
// function it returns is called, which returns once step has returned.
func churn(step func(i int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			step(i)
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
