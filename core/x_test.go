package core

import (
	"context"
	"testing"
)

func BenchmarkXDecide(b *testing.B) {
	l := benchLimiterX(b)
	ctx := context.Background()
	req := Request{User: "alice"}
	var d Decision
	for b.Loop() {
		if err := l.Decide(ctx, &req, 1, &d); err != nil || !d.Allowed {
			b.Fatal(err)
		}
	}
}

func BenchmarkXAllow(b *testing.B) {
	l := benchLimiterX(b)
	ctx := context.Background()
	req := Request{User: "alice"}
	for b.Loop() {
		d, err := l.Allow(ctx, req)
		if err != nil || !d.Allowed {
			b.Fatal(err)
		}
	}
}

func benchLimiterX(b *testing.B) *Limiter {
	p, err := NewPolicy(Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)})
	if err != nil {
		b.Fatal(err)
	}
	l, err := NewLimiter(p)
	if err != nil {
		b.Fatal(err)
	}
	return l
}
