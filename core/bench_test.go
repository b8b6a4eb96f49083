package core

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func benchLimiter(b *testing.B, rules ...Rule) *Limiter {
	b.Helper()
	p, err := NewPolicy(rules...)
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLimiter(p)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkHotKeyAllow: one key, a limit high enough that every call is
// allowed.
func BenchmarkHotKeyAllow(b *testing.B) {
	l := benchLimiter(b, Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
	ctx := context.Background()
	req := Request{User: "alice"}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, _ := l.Allow(ctx, req)
			if !d.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				d, _ := l.Allow(ctx, req)
				if !d.Allowed {
					b.Error("denied")
					return
				}
			}
		})
	})
	b.Run("decide", func(b *testing.B) {
		// Decide into one Decision, as a hot loop or a middleware does.
		b.ReportAllocs()
		var d Decision
		for b.Loop() {
			if err := l.Decide(ctx, &req, 1, &d); err != nil || !d.Allowed {
				b.Fatal("denied", err)
			}
		}
	})
}

// BenchmarkHotKeyDeny: one key whose bucket is empty; every call is denied.
func BenchmarkHotKeyDeny(b *testing.B) {
	l := benchLimiter(b, Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerDay(1), 1)})
	ctx := context.Background()
	req := Request{User: "alice"}
	l.Allow(ctx, req)
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, _ := l.Allow(ctx, req)
			if d.Allowed {
				b.Fatal("allowed")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				d, _ := l.Allow(ctx, req)
				if d.Allowed {
					b.Error("allowed")
					return
				}
			}
		})
	})
}

// BenchmarkManyKeys: 100k keys, visited in turn by every goroutine.
func BenchmarkManyKeys(b *testing.B) {
	const n = 100_000
	l := benchLimiter(b, Rule{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "10.0." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&255)
	}
	ctx := context.Background()
	for _, k := range keys {
		l.Allow(ctx, Request{IP: k})
	}
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(7919)
		for pb.Next() {
			i++
			d, _ := l.Allow(ctx, Request{IP: keys[i%n]})
			if !d.Allowed {
				b.Error("denied")
				return
			}
		}
	})
}

// BenchmarkThreeTier: per-user, per-endpoint and global on every call.
func BenchmarkThreeTier(b *testing.B) {
	l := benchLimiter(b,
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)},
		Rule{Name: "per-endpoint", Scope: ScopeEndpoint, Limit: TokenBucket(PerSecond(1<<20), 1<<30)},
		Rule{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerSecond(1<<20), 1<<30)},
	)
	ctx := context.Background()
	req := Request{User: "alice", Endpoint: "GET /items/{id}"}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			d, _ := l.Allow(ctx, req)
			if !d.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				d, _ := l.Allow(ctx, req)
				if !d.Allowed {
					b.Error("denied")
					return
				}
			}
		})
	})
}

// BenchmarkStoreHotKey measures the store alone, as peers' stores are
// measured.
func BenchmarkStoreHotKey(b *testing.B) {
	s, _ := NewMemoryStore()
	p, err := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
	if err != nil {
		b.Fatal(err)
	}
	lim := &p.rules[0].Limit
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		t := &Take{Cost: 1, Buckets: []Bucket{{Rule: "r", Key: "alice", Limit: lim}}, States: make([]BucketState, 1)}
		for pb.Next() {
			s.Take(context.Background(), t)
		}
	})
}

// btRoomy is a limit no benchmark exhausts: 2^32 requests at once (49.7
// days at 1000 a second, inside MaxSpan), so every request is allowed.
func btRoomy(k int64) Limit { return TokenBucket(PerSecond(1000*k), 1<<32) }

// btStore returns a memory store for maxKeys buckets that keeps buckets
// that are full again (WithReclaimDelay): what a benchmark created before
// its timer stays in the store, and the timed loop inserts nothing.
func btStore(b *testing.B, maxKeys int) *MemoryStore {
	b.Helper()
	s, err := NewMemoryStore(WithMaxKeys(maxKeys), WithReclaimDelay(MaxSpan))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// btTenantCounts are the table sizes of BenchmarkTenants and
// BenchmarkTenantsSpread. 1024 is not asked for by the claim under test
// but separates its two effects: every lookup a hit, in a table the size
// of the traffic.
var btTenantCounts = []int{1, 1024, 10_000, 1_000_000}

// btRequested is the number of identities BenchmarkTenants requests.
const btRequested = 1024

func btTenantID(i int) string { return "tenant-" + strconv.Itoa(i) }

// btTenantLimit is tenant i's limit: four distinct limits, so that the
// table interns several and decisions read different ones.
func btTenantLimit(i int) Limit { return btRoomy(int64(1 + i%4)) }

// btTenantTable returns a table of n tenants, tenant-0 to tenant-(n-1).
func btTenantTable(b *testing.B, n int) *LimitTable {
	b.Helper()
	tab := NewLimitTable()
	for i := range n {
		if err := tab.Set(btTenantID(i), btTenantLimit(i)); err != nil {
			b.Fatal(err)
		}
	}
	if tab.Len() != n {
		b.Fatalf("table of %d tenants has Len() %d", n, tab.Len())
	}
	return tab
}

// btTenantLimiter returns a limiter with one per-tenant rule on tab, its
// store sized for maxKeys buckets, and every request of reqs already
// decided once, so that the timed loop finds every bucket in the store.
func btTenantLimiter(b *testing.B, tab *LimitTable, reqs []Request, maxKeys int) *Limiter {
	b.Helper()
	p, err := NewPolicy(Rule{Name: "per-tenant", Scope: Dimension("tenant"), Limit: btRoomy(1), Lookup: tab})
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLimiter(p, WithStore(btStore(b, maxKeys)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, r := range reqs {
		if d, err := l.Allow(ctx, r); err != nil || !d.Allowed {
			b.Fatalf("warm-up: %+v, %v", d, err)
		}
	}
	return l
}

func btTenantRequests(ids int) []Request {
	reqs := make([]Request, ids)
	for i := range reqs {
		reqs[i] = Request{Dims: []Dim{{Name: "tenant", Value: btTenantID(i)}}}
	}
	return reqs
}

// btDecide runs the requests of reqs in turn, serial and parallel, each
// goroutine from its own place, stepping by stride (odd and not a multiple
// of 5, so coprime with every length used here: every request is visited).
// Each mode makes its limiter once, outside the timer, and keeps it over
// every run (-count and RunParallel's rounds).
func btDecide(b *testing.B, newLimiter func(b *testing.B) *Limiter, reqs []Request, stride int) {
	ctx := context.Background()
	n := len(reqs)
	once := func() func(b *testing.B) *Limiter {
		var l *Limiter
		return func(b *testing.B) *Limiter {
			if l == nil {
				l = newLimiter(b)
			}
			return l
		}
	}
	serial, parallel := once(), once()
	b.Run("serial", func(b *testing.B) {
		l := serial(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i += stride
			if i >= n {
				i %= n
			}
			d, _ := l.Allow(ctx, reqs[i])
			if !d.Allowed {
				b.Fatalf("%+v denied: %+v", reqs[i], d)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		l := parallel(b)
		var start atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(start.Add(7919) % uint64(n))
			for pb.Next() {
				i += stride
				if i >= n {
					i %= n
				}
				d, _ := l.Allow(ctx, reqs[i])
				if !d.Allowed {
					b.Errorf("%+v denied: %+v", reqs[i], d)
					return
				}
			}
		})
	})
}

// BenchmarkTenants: one rule whose limit comes from a LimitTable of N
// tenants, deciding the same 1024 identities (tenant-0 to tenant-1023) in
// the same order whatever N, so that only the table's size changes: the
// same rule, one lookup and one bucket per decision, the same 1024 buckets
// in the store, built and decided once before the timer starts.
//
// The table holds tenant-0 to tenant-(N-1): for N >= 1024 every request is
// a hit and the other N-1024 tenants are only in the table. For N = 1 the
// table holds tenant-0 alone and the other 1023 requests fall back to the
// rule's Limit, of the same shape as the tenants' limits. A miss does the
// same work as a hit (hash, one shard's read lock, one map probe), in a map
// that is nearly empty, the cheapest a lookup can be: tenants=1 is the
// lowest baseline, so the ratio 1M/1 bounds from above how a decision's
// cost grows with the number of tenants. tenants=1024 (all hits, no extra
// tenant) separates the miss from the table's size. Traffic spread over
// all N tenants, store included, is BenchmarkTenantsSpread.
func BenchmarkTenants(b *testing.B) {
	reqs := btTenantRequests(btRequested)
	for _, n := range btTenantCounts {
		tab := btTenantTable(b, n) // outside every timer
		b.Run("tenants="+strconv.Itoa(n), func(b *testing.B) {
			btDecide(b, func(b *testing.B) *Limiter { return btTenantLimiter(b, tab, reqs, 1_000_000) }, reqs, 1)
		})
		runtime.KeepAlive(tab)
	}
}

// BenchmarkTenantsSpread is informative: the traffic is spread uniformly
// over all N tenants of the table, so with N large every decision also
// misses the CPU caches in the memory store (N buckets, all created before
// the timer, in a store sized for them) as well as in the table. Compare
// with BenchmarkManyKeys, which has no table.
func BenchmarkTenantsSpread(b *testing.B) {
	for _, n := range btTenantCounts {
		tab := btTenantTable(b, n)
		reqs := btTenantRequests(n)
		b.Run("tenants="+strconv.Itoa(n), func(b *testing.B) {
			btDecide(b, func(b *testing.B) *Limiter { return btTenantLimiter(b, tab, reqs, 2*n+1024) }, reqs, 7919)
		})
	}
}

// BenchmarkRoutes: a policy that limits each of R routes with a rule of
// its own ("GET /r0" ... ), plus a per-user and a per-ip rule on every
// route, with requests cycling over the R routes; routes=1 is the same with
// one route rule. Every decision has three tiers (its route's, per-user,
// per-ip) over the same 64 users and IPs, so the ratio routes=20 / routes=1
// shows whether a decision's cost grows with the number of route rules it
// does not apply. (The store holds more route buckets with 20 routes, 320
// against 64: both fit in the caches.)
func BenchmarkRoutes(b *testing.B) {
	for _, routes := range []int{1, 20} {
		rules := make([]Rule, 0, routes+2)
		for i := range routes {
			rules = append(rules, Rule{Name: "route-" + strconv.Itoa(i), Scope: ScopeUser, Limit: btRoomy(1), Routes: []string{"GET /r" + strconv.Itoa(i)}})
		}
		rules = append(rules,
			Rule{Name: "per-user", Scope: ScopeUser, Limit: btRoomy(1)},
			Rule{Name: "per-ip", Scope: ScopeIP, Limit: btRoomy(1)},
		)
		p, err := NewPolicy(rules...)
		if err != nil {
			b.Fatal(err)
		}
		// 1280 requests: user and IP j%64, route j%routes.
		reqs := make([]Request, 64*20)
		for j := range reqs {
			reqs[j] = Request{
				User:   "user-" + strconv.Itoa(j%64),
				IP:     "10.0.0." + strconv.Itoa(j%64),
				Method: "GET",
				Route:  "/r" + strconv.Itoa(j%routes),
			}
		}
		newLimiter := func(b *testing.B) *Limiter {
			l, err := NewLimiter(p, WithStore(btStore(b, 1_000_000)))
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range reqs {
				if d, err := l.Allow(context.Background(), r); err != nil || len(d.Tiers()) != 3 {
					b.Fatalf("warm-up: %+v with %d tiers, %v; want 3 tiers", d, len(d.Tiers()), err)
				}
			}
			return l
		}
		b.Run("routes="+strconv.Itoa(routes), func(b *testing.B) { btDecide(b, newLimiter, reqs, 1) })
	}
}

var _ = time.Second

// BenchmarkObserved: a hot-key decision without an observer, with one that
// does nothing (what the limiter itself adds: the pooled event, the
// sampling, one timed decision in 16), and with a Tally recording it (what
// the metrics adapters add on top). The variants alternate within each
// round, so that -count N interleaves them; compare medians.
func BenchmarkObserved(b *testing.B) {
	tally := NewTally()
	for _, v := range []struct {
		name string
		opts []Option
	}{
		{"none", nil},
		{"noop", []Option{WithObserver(func(context.Context, *Event) {})}},
		{"tally", []Option{WithObserver(func(_ context.Context, e *Event) { tally.Record(e) })}},
	} {
		p, err := NewPolicy(Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
		if err != nil {
			b.Fatal(err)
		}
		l, err := NewLimiter(p, v.opts...)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		req := Request{User: "alice"}
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := l.Allow(ctx, req); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
	}
}
