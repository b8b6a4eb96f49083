package core

import (
	"context"
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

var _ = time.Second
