package core

// Edge cases of selectors and lookups: zero values, nil lookups, GET
// covering HEAD, error prefixes.

import (
	"context"
	"strings"
	"testing"
)

func TestEdgeZeroRouteSelector(t *testing.T) {
	var zero RouteSelector
	for _, r := range [][2]string{{"GET", "/x"}, {"POST", ""}, {"", "/x"}} {
		if zero.Match(r[0], r[1]) {
			t.Errorf("RouteSelector{}.Match(%q, %q) = true, want false (the zero value selects nothing)", r[0], r[1])
		}
	}
	if zero.Covers(mustRoute(t, "GET /x")) {
		t.Errorf("RouteSelector{}.Covers(GET /x) = true, want false")
	}
}

func TestEdgeCoversHead(t *testing.T) {
	for _, c := range [][2]string{{"GET /x", "HEAD /x"}, {"GET", "HEAD"}, {"GET", "HEAD /x"}} {
		s, s2 := mustRoute(t, c[0]), mustRoute(t, c[1])
		all := true
		for _, m := range rtMethods {
			for _, r := range rtRoutes {
				if s2.Match(m, r) && !s.Match(m, r) {
					all = false
				}
			}
		}
		if all && !s.Covers(s2) {
			t.Errorf("ParseRoute(%q).Covers(%q) = false, but it selects every request %q does", c[0], c[1], c[1])
		}
	}
}

func TestEdgeNilLookup(t *testing.T) {
	for name, lk := range map[string]Lookup{"nil *LimitTable": (*LimitTable)(nil), "nil LookupFunc": LookupFunc(nil)} {
		t.Run(name, func(t *testing.T) {
			p, err := NewPolicy(Rule{Name: "per-tenant", Scope: ScopeUser, Limit: TokenBucket(PerMinute(2), 2), Lookup: lk})
			if err != nil {
				return // refused at construction: fixed
			}
			l, _ := NewLimiter(p)
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("NewPolicy accepted Lookup %s; AllowAt then panics: %v", name, r)
				}
			}()
			l.AllowAt(context.Background(), t0, Request{User: "u"}, 1)
		})
	}
}

func TestEdgeZeroLimitTableSet(t *testing.T) {
	var tab LimitTable
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("LimitTable{}.Set panics: %v; want an error (ErrNotConstructed)", r)
		}
	}()
	tab.Set("acme", TokenBucket(PerMinute(1), 1))
}

func TestEdgeSetErrorPrefix(t *testing.T) {
	err := NewLimitTable().Set("acme", TokenBucket(PerMinute(1), 0))
	if !strings.HasPrefix(err.Error(), "ratelimit: ") {
		t.Errorf("Set error %q does not start with \"ratelimit: \"", err)
	}
}
