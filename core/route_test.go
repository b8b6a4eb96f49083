package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseRouteValid(t *testing.T) {
	for _, tc := range []struct {
		in, method, route string
	}{
		{"GET /items/{id}", "GET", "/items/{id}"},
		{"HEAD /items/{id}", "HEAD", "/items/{id}"},
		{"DELETE /items/{id}", "DELETE", "/items/{id}"},
		{"/items/{id}", "", "/items/{id}"},
		{"POST", "POST", ""},
		{"GET", "GET", ""},
		{"/pkg.Service/Method", "", "/pkg.Service/Method"},
		{"/", "", "/"},
		{"GET /", "GET", "/"},
		{"/files/{path...}", "", "/files/{path...}"},
		{"/files/{*}", "", "/files/{*}"},
		{"/users/{name?}", "", "/users/{name?}"},
		{"/api/items/{id}", "", "/api/items/{id}"},
		{"example.com/items/{id}", "", "example.com/items/{id}"},
		{"GET example.com/items/{id}", "GET", "example.com/items/{id}"},
		// A colon or star inside a segment is not a router wildcard.
		{"POST /v1/things/{id}:cancel", "POST", "/v1/things/{id}:cancel"},
		{"/v1/things:batchGet", "", "/v1/things:batchGet"},
		{"/a/b*", "", "/a/b*"},
		{"/a/b+", "", "/a/b+"},
		// fiber's "/flights/:from-:to", as flow.ColonRoute reports it.
		{"/flights/{from-:to}", "", "/flights/{from-:to}"},
		// fiber's adjacent parameters "/x/:a:b" and "/x/:a:b?", likewise.
		{"GET /x/{a:b}", "GET", "/x/{a:b}"},
		{"/x/{a:b?}", "", "/x/{a:b?}"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			s, err := ParseRoute(tc.in)
			if err != nil {
				t.Fatalf("ParseRoute(%q) error = %v, want nil", tc.in, err)
			}
			if s.Method() != tc.method || s.Route() != tc.route {
				t.Errorf("ParseRoute(%q) = {Method:%q Route:%q}, want {%q %q}", tc.in, s.Method(), s.Route(), tc.method, tc.route)
			}
			if s.String() != tc.in {
				t.Errorf("ParseRoute(%q).String() = %q, want the input", tc.in, s.String())
			}
			if s2, err := ParseRoute(s.String()); err != nil || s2 != s {
				t.Errorf("ParseRoute(%q) again = %v, %v; want %v, nil", s.String(), s2, err, s)
			}
		})
	}
}

func TestParseRouteErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		hint     string // the message says this, when not ""
	}{
		{"empty", "", "empty route"},
		{"gin param", "/items/:id", `"/items/{id}"`},
		{"gin param with method", "GET /items/:id", `"/items/{id}"`},
		{"fiber optional param", "/users/:name?", `"/users/{name?}"`},
		{"fiber constraint", "/items/:id<int>", `"/items/{id}"`},
		{"bare :id", ":id", "method"},
		{"gin catch-all", "/files/*path", `"/files/{path...}"`},
		{"bare *path", "*path", "method"},
		{"chi catch-all", "/files/*", `"/files/{*}"`},
		{"fiber greedy", "/files/+", `"/files/{+}"`},
		{"chi regexp", "/items/{id:[0-9]+}", `"/items/{id}"`},
		{"chi regexp with braces", "/items/{id:[0-9]{3}}.json", `"/items/{id}.json"`},
		{"chi regexps in one segment", "GET /d/{a:x+}-{b:[y]}", `"/d/{a}-{b}"`},
		{"chi regexp and catch-all", "/d/{a:x|y}/*", `"/d/{a}/{*}"`},
		{"bare *", "*", "method"},
		{"lower-case method", "get /items", "method \"get\""},
		{"lower-case method only", "post", "method \"post\""},
		{"mixed-case method", "Get /items", "method"},
		{"method with digit", "GET2 /items", "method"},
		{"leading blank", " /items", ""},
		{"trailing blank", "GET ", ""},
		{"two blanks", "GET  /items", "blank"},
		{"blank in route", "GET /a b", "blank"},
		{"blank at end of route", "/items ", "want"},
		{"tab", "GET\t/items", "control"},
		{"newline", "/items\n", "control"},
		{"DEL", "/items\x7f", "control"},
		{"route without a slash", "GET items", "\"/\""},
		{"blank only", " ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseRoute(tc.in)
			if err == nil {
				t.Fatalf("ParseRoute(%q) = %v, nil; want an error wrapping ErrInvalidRule", tc.in, s)
			}
			if !errors.Is(err, ErrInvalidRule) {
				t.Errorf("ParseRoute(%q) error = %v, want it to wrap ErrInvalidRule", tc.in, err)
			}
			if s != (RouteSelector{}) {
				t.Errorf("ParseRoute(%q) = %v with its error, want the zero RouteSelector", tc.in, s)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "ratelimit: ") {
				t.Errorf("ParseRoute(%q) error %q does not start with \"ratelimit: \"", tc.in, msg)
			}
			if tc.hint != "" && !strings.Contains(msg, tc.hint) {
				t.Errorf("ParseRoute(%q) error %q does not say %q", tc.in, msg, tc.hint)
			}
		})
	}
}

// TestNewPolicyRouteError: a bad selector fails NewPolicy naming the rule.
func TestNewPolicyRouteError(t *testing.T) {
	_, err := NewPolicy(
		Rule{Name: "ok", Scope: ScopeUser, Limit: TokenBucket(PerMinute(1), 1), Routes: []string{"GET /a"}},
		Rule{Name: "search", Scope: ScopeUser, Limit: TokenBucket(PerMinute(1), 1), Routes: []string{"/b", "GET /items/:id"}},
	)
	var re *RuleError
	if !errors.As(err, &re) || re.Rule != "search" || !errors.Is(err, ErrInvalidRule) {
		t.Fatalf("NewPolicy error = %v, want a *RuleError for rule \"search\" wrapping ErrInvalidRule", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "Routes") || !strings.Contains(msg, "{id}") {
		t.Errorf("NewPolicy error %q does not name the field Routes and the brace form {id}", msg)
	}
}

func mustRoute(t testing.TB, s string) RouteSelector {
	t.Helper()
	sel, err := ParseRoute(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

func TestRouteSelectorMatch(t *testing.T) {
	for _, tc := range []struct {
		sel, method, route string
		want               bool
	}{
		// Method and route.
		{"GET /items/{id}", "GET", "/items/{id}", true},
		{"GET /items/{id}", "HEAD", "/items/{id}", true}, // routers serve HEAD with the GET handler
		{"GET /items/{id}", "POST", "/items/{id}", false},
		{"GET /items/{id}", "GET", "/items", false},
		{"GET /items/{id}", "GET", "", false}, // no route matched
		{"GET /items/{id}", "", "/items/{id}", false},
		{"HEAD /items/{id}", "HEAD", "/items/{id}", true},
		{"HEAD /items/{id}", "GET", "/items/{id}", false}, // HEAD does not select GET
		{"POST /items", "post", "/items", false},          // methods are case-sensitive
		// Route only: every method, and none (gRPC).
		{"/items/{id}", "GET", "/items/{id}", true},
		{"/items/{id}", "DELETE", "/items/{id}", true},
		{"/items/{id}", "", "/items/{id}", true},
		{"/items/{id}", "GET", "/items/{id}/", false},
		{"/items/{id}", "GET", "", false},
		// Method only: every route, and none.
		{"POST", "POST", "/items", true},
		{"POST", "POST", "", true}, // a request no route matched (a 404)
		{"POST", "GET", "/items", false},
		{"POST", "", "/items", false},
		{"POST", "", "", false},
		{"GET", "HEAD", "/items", true},
		{"GET", "HEAD", "", true},
		{"GET", "GET", "", true},
		{"HEAD", "GET", "/items", false},
		// gRPC: the full method is the route, there is no HTTP method.
		{"/pkg.Service/Method", "", "/pkg.Service/Method", true},
		{"/pkg.Service/Method", "", "/pkg.Service/Other", false},
		{"/pkg.Service/Method", "", "", false},
		{"/pkg.Service/Method", "POST", "/pkg.Service/Method", true},
	} {
		if got := mustRoute(t, tc.sel).Match(tc.method, tc.route); got != tc.want {
			t.Errorf("ParseRoute(%q).Match(%q, %q) = %v, want %v", tc.sel, tc.method, tc.route, got, tc.want)
		}
	}
}

// rtMethods and rtRoutes are the requests the selector tests try: every
// method the selectors name, one none does, and none; likewise routes.
var (
	rtMethods = []string{"GET", "HEAD", "POST", "PUT", "DELETE", ""}
	rtRoutes  = []string{"/a", "/b", "/a/{id}", "/pkg.S/M", ""}
	rtSels    = []string{"GET", "HEAD", "POST", "/a", "/b", "/a/{id}", "/pkg.S/M", "GET /a", "HEAD /a", "POST /a", "GET /b", "POST /a/{id}", "PUT /pkg.S/M"}
)

func TestRouteSelectorCovers(t *testing.T) {
	for _, tc := range []struct {
		s, s2 string
		want  bool
	}{
		{"/x", "/x", true},
		{"/x", "GET /x", true},
		{"/x", "POST /x", true},
		{"/x", "/y", false},
		{"/x", "GET", false}, // GET selects GET /y too
		{"GET", "GET", true},
		{"GET", "GET /x", true},
		{"GET", "/x", false}, // /x selects POST /x too
		{"GET", "POST", false},
		{"GET", "POST /x", false},
		{"POST", "POST /x", true},
		{"GET /x", "GET /x", true},
		{"GET /x", "/x", false},
		{"GET /x", "GET", false},
		{"GET /x", "POST /x", false},
		{"GET /x", "GET /y", false},
		{"HEAD /x", "GET /x", false}, // GET /x selects GET requests
		{"/pkg.S/M", "/pkg.S/M", true},
		{"/pkg.S/M", "/pkg.S/N", false},
	} {
		if got := mustRoute(t, tc.s).Covers(mustRoute(t, tc.s2)); got != tc.want {
			t.Errorf("ParseRoute(%q).Covers(%q) = %v, want %v", tc.s, tc.s2, got, tc.want)
		}
	}
	// Whatever the pairs, Covers never claims more than Match shows: if s
	// covers s2, every request s2 selects s selects.
	for _, a := range rtSels {
		for _, b := range rtSels {
			s, s2 := mustRoute(t, a), mustRoute(t, b)
			if !s.Covers(s2) {
				continue
			}
			for _, m := range rtMethods {
				for _, r := range rtRoutes {
					if s2.Match(m, r) && !s.Match(m, r) {
						t.Errorf("ParseRoute(%q).Covers(%q) = true, but Match(%q, %q) is true for %q only", a, b, m, r, b)
					}
				}
			}
		}
	}
}

// rtStep is one request of a timeline and what its decision must say.
type rtStep struct {
	name      string
	at        time.Duration // after t0
	req       Request
	cost      int64
	allowed   bool
	rule      string        // the deciding tier
	remaining int64         // the decision's Remaining
	retry     time.Duration // the decision's RetryAfter
	tiers     string        // "name=remaining,..." in policy order
}

func rtTiers(d *Decision) string {
	var b strings.Builder
	for i, ts := range d.Tiers() {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%d", ts.Rule.Name, ts.Remaining)
	}
	return b.String()
}

func rtRun(t *testing.T, l *Limiter, steps ...rtStep) {
	t.Helper()
	for _, s := range steps {
		d, err := l.AllowAt(context.Background(), t0.Add(s.at), s.req, s.cost)
		if err != nil {
			t.Fatalf("%s: AllowAt(t0+%v, %s %s, %d) error = %v", s.name, s.at, s.req.Method, s.req.Route, s.cost, err)
		}
		if d.Allowed != s.allowed || d.Rule != s.rule || d.Remaining != s.remaining || d.RetryAfter != s.retry || rtTiers(&d) != s.tiers {
			t.Errorf("%s: AllowAt(t0+%v, %s %s, %d) = {Allowed:%v Rule:%q Remaining:%d RetryAfter:%v Tiers:%s}, want {%v %q %d %v %s}",
				s.name, s.at, s.req.Method, s.req.Route, s.cost, d.Allowed, d.Rule, d.Remaining, d.RetryAfter, rtTiers(&d),
				s.allowed, s.rule, s.remaining, s.retry, s.tiers)
		}
	}
}

// TestRouteTierAllOrNothing: a stricter tier on one route is decided with
// the per-user tier in one take; a request it denies takes nothing from the
// per-user tier.
func TestRouteTierAllOrNothing(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerMinute(10), 10)},
		Rule{Name: "search", Scope: ScopeUser, Limit: TokenBucket(PerMinute(2), 2), Routes: []string{"GET /search"}},
	)
	search := Request{User: "alice", Method: "GET", Route: "/search"}
	head := Request{User: "alice", Method: "HEAD", Route: "/search"}
	post := Request{User: "alice", Method: "POST", Route: "/search"}
	items := Request{User: "alice", Method: "GET", Route: "/items/{id}"}
	rtRun(t, l,
		rtStep{"search 1", 0, search, 1, true, "search", 1, 0, "per-user=9,search=1"},
		rtStep{"search 2 (HEAD via GET)", 0, head, 1, true, "search", 0, 0, "per-user=8,search=0"},
		// Denied by search: per-user shows its balance, 8, and keeps it.
		rtStep{"search 3", 0, search, 1, false, "search", 0, 30 * time.Second, "per-user=8,search=0"},
		rtStep{"search 4", 0, search, 1, false, "search", 0, 30 * time.Second, "per-user=8,search=0"},
		rtStep{"read per-user", 0, items, 0, true, "per-user", 8, 0, "per-user=8"},
		rtStep{"POST is not selected", 0, post, 1, true, "per-user", 7, 0, "per-user=7"},
		rtStep{"other route", 0, items, 1, true, "per-user", 6, 0, "per-user=6"},
		// At +30s per-user is full again and search has one token: a cost
		// of 2 is denied by search and takes nothing from per-user.
		rtStep{"search at +30s, cost 2", 30 * time.Second, search, 2, false, "search", 1, 30 * time.Second, "per-user=10,search=1"},
		rtStep{"search at +30s", 30 * time.Second, search, 1, true, "search", 0, 0, "per-user=9,search=0"},
		// Another user has buckets of its own on both tiers.
		rtStep{"bob", 30 * time.Second, Request{User: "bob", Method: "GET", Route: "/search"}, 1, true, "search", 1, 0, "per-user=9,search=1"},
		// Anonymous: neither tier applies (both are per user).
		rtStep{"anonymous", 30 * time.Second, Request{Method: "GET", Route: "/search"}, 1, true, "", 0, 0, ""},
	)
}

// TestRouteTierDeniedByUser: when the per-user tier denies, the route
// tier keeps its tokens.
func TestRouteTierDeniedByUser(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "search", Scope: ScopeUser, Limit: TokenBucket(PerMinute(5), 5), Routes: []string{"GET /search"}},
		Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerMinute(2), 2)},
	)
	search := Request{User: "alice", Method: "GET", Route: "/search"}
	other := Request{User: "alice", Method: "GET", Route: "/other"}
	rtRun(t, l,
		rtStep{"other 1", 0, other, 1, true, "per-user", 1, 0, "per-user=1"},
		rtStep{"other 2", 0, other, 1, true, "per-user", 0, 0, "per-user=0"},
		rtStep{"search, per-user empty", 0, search, 1, false, "per-user", 0, 30 * time.Second, "search=5,per-user=0"},
		rtStep{"search at +30s", 30 * time.Second, search, 1, true, "per-user", 0, 0, "search=4,per-user=0"},
	)
}

func TestRouteMethodOnly(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "writes", Scope: ScopeUser, Limit: TokenBucket(PerMinute(2), 2), Routes: []string{"POST", "PUT", "DELETE"}},
		Rule{Name: "reads", Scope: ScopeIP, Limit: TokenBucket(PerMinute(3), 3), Routes: []string{"GET"}},
	)
	req := func(method, route string) Request {
		return Request{User: "alice", IP: "192.0.2.1", Method: method, Route: route}
	}
	rtRun(t, l,
		rtStep{"POST /a", 0, req("POST", "/a"), 1, true, "writes", 1, 0, "writes=1"},
		rtStep{"PUT /b shares the bucket", 0, req("PUT", "/b"), 1, true, "writes", 0, 0, "writes=0"},
		rtStep{"DELETE with no route", 0, req("DELETE", ""), 1, false, "writes", 0, 30 * time.Second, "writes=0"},
		rtStep{"PATCH is not selected", 0, req("PATCH", "/a"), 1, true, "", 0, 0, ""},
		rtStep{"GET /a", 0, req("GET", "/a"), 1, true, "reads", 2, 0, "reads=2"},
		rtStep{"HEAD with no route", 0, req("HEAD", ""), 1, true, "reads", 1, 0, "reads=1"},
		rtStep{"GET /c", 0, req("GET", "/c"), 1, true, "reads", 0, 0, "reads=0"},
		rtStep{"GET /a again", 0, req("GET", "/a"), 1, false, "reads", 0, 20 * time.Second, "reads=0"},
		rtStep{"gRPC call", 0, req("", "/pkg.S/M"), 1, true, "", 0, 0, ""},
	)
}

// TestRouteMultipleSelectors: one rule on several selectors is one bucket
// per identity, counted once even when several selectors match.
func TestRouteMultipleSelectors(t *testing.T) {
	l := newTestLimiter(t, nil,
		Rule{Name: "expensive", Scope: ScopeUser, Limit: TokenBucket(PerMinute(3), 3),
			Routes: []string{"GET /report", "POST /export", "/pkg.Reports/Build", "GET", "/report"}},
	)
	req := func(method, route string) Request { return Request{User: "alice", Method: method, Route: route} }
	rtRun(t, l,
		rtStep{"GET /report (three selectors match)", 0, req("GET", "/report"), 1, true, "expensive", 2, 0, "expensive=2"},
		rtStep{"POST /export", 0, req("POST", "/export"), 1, true, "expensive", 1, 0, "expensive=1"},
		rtStep{"gRPC", 0, req("", "/pkg.Reports/Build"), 1, true, "expensive", 0, 0, "expensive=0"},
		rtStep{"PUT /report (route only)", 0, req("PUT", "/report"), 1, false, "expensive", 0, 20 * time.Second, "expensive=0"},
		rtStep{"POST /report", 0, req("POST", "/report"), 1, false, "expensive", 0, 20 * time.Second, "expensive=0"},
		rtStep{"GET /anything (method only)", 0, req("GET", "/anything"), 1, false, "expensive", 0, 20 * time.Second, "expensive=0"},
		rtStep{"POST /other is not selected", 0, req("POST", "/other"), 1, true, "", 0, 0, ""},
		rtStep{"GET /report at +20s", 20 * time.Second, req("GET", "/report"), 1, true, "expensive", 0, 0, "expensive=0"},
	)
}

// rtOrderRules mixes rules for every route (always), route selectors
// (byRoute) and method-only ones (byMethod), with one rule in two lists.
var rtOrderRules = []Rule{
	{Name: "m-get", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100), Routes: []string{"GET"}},
	{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100)},
	{Name: "route-x", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100), Routes: []string{"/x"}},
	{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerMinute(100), 100)},
	{Name: "get-x-post-y", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100), Routes: []string{"GET /x", "POST /y"}},
	{Name: "other", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100), Routes: []string{"/z"}},
	{Name: "both", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100), Routes: []string{"GET", "/x", "DELETE"}},
	{Name: "grpc", Scope: ScopeIP, Limit: TokenBucket(PerMinute(100), 100), Routes: []string{"/pkg.S/M"}},
	{Name: "off", Scope: ScopeUser, Limit: TokenBucket(PerMinute(100), 100), Routes: []string{"/x"}, Disabled: true},
	{Name: "global", Scope: ScopeGlobal, Limit: TokenBucket(PerMinute(100), 100)},
}

func rtNames(d *Decision) string {
	var names []string
	for _, ts := range d.Tiers() {
		names = append(names, ts.Rule.Name)
	}
	return strings.Join(names, ",")
}

// TestRouteTiersInPolicyOrder: Decision.Tiers() lists the rules in policy
// order, each once, when the lists of the index merge.
func TestRouteTiersInPolicyOrder(t *testing.T) {
	l := newTestLimiter(t, nil, rtOrderRules...)
	for _, tc := range []struct {
		method, route, want string
	}{
		{"GET", "/x", "m-get,per-user,route-x,per-ip,get-x-post-y,both,global"},
		{"HEAD", "/x", "m-get,per-user,route-x,per-ip,get-x-post-y,both,global"},
		{"POST", "/x", "per-user,route-x,per-ip,both,global"},
		{"POST", "/y", "per-user,per-ip,get-x-post-y,global"},
		{"GET", "/y", "m-get,per-user,per-ip,both,global"},
		{"DELETE", "/z", "per-user,per-ip,other,both,global"},
		{"GET", "", "m-get,per-user,per-ip,both,global"},
		{"PUT", "", "per-user,per-ip,global"},
		{"", "/pkg.S/M", "per-user,per-ip,grpc,global"},
		{"", "", "per-user,per-ip,global"},
	} {
		req := Request{User: "u", IP: "192.0.2.1", Method: tc.method, Route: tc.route}
		d, err := l.AllowAt(context.Background(), t0, req, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("AllowAt(t0, %s %s, 1) = %+v, %v; want allowed", tc.method, tc.route, d, err)
		}
		if got := rtNames(&d); got != tc.want {
			t.Errorf("AllowAt(t0, %s %s, 1).Tiers() = %s, want %s", tc.method, tc.route, got, tc.want)
		}
	}
}

// TestRouteIndexMatchesScan: on random policies and requests, the rules a
// decision applies are exactly those a scan of every rule in order with
// RouteSelector.Match selects, whatever the index does.
func TestRouteIndexMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		n := 1 + rng.IntN(9)
		rules := make([]Rule, n)
		for i := range rules {
			rules[i] = Rule{Name: fmt.Sprintf("r%d", i), Scope: ScopeUser, Limit: TokenBucket(PerMinute(1000), 1000)}
			for range rng.IntN(4) { // 0: every route
				rules[i].Routes = append(rules[i].Routes, rtSels[rng.IntN(len(rtSels))])
			}
			rules[i].Disabled = rng.IntN(8) == 0
		}
		p, err := NewPolicy(rules...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := NewLimiter(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rtMethods {
			for _, r := range rtRoutes {
				var want []string
				for _, rule := range rules {
					match := len(rule.Routes) == 0
					for _, s := range rule.Routes {
						match = match || mustRoute(t, s).Match(m, r)
					}
					if match && !rule.Disabled {
						want = append(want, rule.Name)
					}
				}
				d, err := l.AllowAt(context.Background(), t0, Request{User: "u", Method: m, Route: r}, 0)
				if err != nil {
					t.Fatal(err)
				}
				if got := rtNames(&d); got != strings.Join(want, ",") {
					t.Fatalf("policy %d %v: AllowAt(t0, %q %q, 0).Tiers() = %s, want %s", iter, rules, m, r, got, strings.Join(want, ","))
				}
			}
		}
	}
}

// TestRouteSetPolicy: SetPolicy moves a route tier to another route; the
// rule keeps its name, and so its buckets.
func TestRouteSetPolicy(t *testing.T) {
	strict := func(route string) *Policy {
		p, err := NewPolicy(
			Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerMinute(10), 10)},
			Rule{Name: "strict", Scope: ScopeUser, Limit: TokenBucket(PerMinute(1), 1), Routes: []string{route}},
		)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	l := newTestLimiter(t, nil)
	if err := l.SetPolicy(strict("GET /a")); err != nil {
		t.Fatal(err)
	}
	a := Request{User: "alice", Method: "GET", Route: "/a"}
	b := Request{User: "alice", Method: "GET", Route: "/b"}
	rtRun(t, l,
		rtStep{"a 1", 0, a, 1, true, "strict", 0, 0, "per-user=9,strict=0"},
		rtStep{"a 2", 0, a, 1, false, "strict", 0, time.Minute, "per-user=9,strict=0"},
		rtStep{"b", 0, b, 1, true, "per-user", 8, 0, "per-user=8"},
	)
	if err := l.SetPolicy(strict("GET /b")); err != nil {
		t.Fatal(err)
	}
	rtRun(t, l,
		rtStep{"a after the switch", 0, a, 1, true, "per-user", 7, 0, "per-user=7"},
		// The same rule, the same bucket: already empty.
		rtStep{"b after the switch", 0, b, 1, false, "strict", 0, time.Minute, "per-user=7,strict=0"},
	)
	// A policy with no route rules at all: nothing is route-scoped.
	p, err := NewPolicy(Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerMinute(10), 10)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	rtRun(t, l, rtStep{"b without route rules", 0, b, 1, true, "per-user", 6, 0, "per-user=6"})
}

// rtView stands for the middleware's request view.
type rtView struct{ header map[string]string }

func TestRouteWhen(t *testing.T) {
	var calls int
	premium := func(r *Request) bool {
		calls++
		v, ok := r.View.(*rtView)
		return ok && v.header["X-Tier"] == "premium"
	}
	mutates := func(r *Request) bool {
		// What a predicate does to its request does not reach the
		// decision or the caller.
		r.User, r.IP, r.Route, r.View = "mallory", "", "/elsewhere", nil
		return true
	}
	l := newTestLimiter(t, nil,
		Rule{Name: "mutates", Scope: ScopeGlobal, Limit: TokenBucket(PerMinute(100), 100), When: mutates},
		Rule{Name: "premium-search", Scope: ScopeUser, Limit: TokenBucket(PerMinute(5), 5), Routes: []string{"GET /search"}, When: premium},
		Rule{Name: "per-ip", Scope: ScopeIP, Limit: TokenBucket(PerMinute(10), 10)},
	)
	prem := &rtView{header: map[string]string{"X-Tier": "premium"}}
	free := &rtView{header: map[string]string{"X-Tier": "free"}}
	req := func(view any, route string) Request {
		return Request{User: "alice", IP: "192.0.2.1", Method: "GET", Route: route, View: view}
	}
	rtRun(t, l,
		rtStep{"premium on the route", 0, req(prem, "/search"), 1, true, "premium-search", 4, 0, "mutates=99,premium-search=4,per-ip=9"},
		rtStep{"free on the route", 0, req(free, "/search"), 1, true, "per-ip", 8, 0, "mutates=98,per-ip=8"},
		rtStep{"no view", 0, req(nil, "/search"), 1, true, "per-ip", 7, 0, "mutates=97,per-ip=7"},
		rtStep{"premium elsewhere", 0, req(prem, "/items"), 1, true, "per-ip", 6, 0, "mutates=96,per-ip=6"},
		rtStep{"premium on the route again", 0, req(prem, "/search"), 1, true, "premium-search", 3, 0, "mutates=95,premium-search=3,per-ip=5"},
	)
	// Called for the requests on its route only (the others never reach it).
	if calls != 4 {
		t.Errorf("premium predicate called %d times, want 4 (the requests to GET /search)", calls)
	}
	// The caller's request is not changed either.
	r := req(prem, "/search")
	if _, err := l.AllowAt(context.Background(), t0, r, 0); err != nil {
		t.Fatal(err)
	}
	if r.User != "alice" || r.IP != "192.0.2.1" || r.Route != "/search" || r.View != prem {
		t.Errorf("request after AllowAt = %+v, want it unchanged", r)
	}
}

// TestRouteDecideAllocs: a decision on route-scoped rules allocates
// nothing when no rule has When, whichever lists of the index it merges.
func TestRouteDecideAllocs(t *testing.T) {
	big := TokenBucket(PerSecond(1<<20), 1<<30)
	var rules []Rule
	for i := range 20 {
		rules = append(rules, Rule{Name: fmt.Sprintf("route-%d", i), Scope: ScopeUser, Limit: big, Routes: []string{fmt.Sprintf("GET /r%d", i)}})
	}
	rules = append(rules,
		Rule{Name: "writes", Scope: ScopeUser, Limit: big, Routes: []string{"POST", "GET"}},
		Rule{Name: "per-user", Scope: ScopeUser, Limit: big},
		Rule{Name: "per-ip", Scope: ScopeIP, Limit: big},
	)
	l := newTestLimiter(t, nil, rules...)
	ctx := context.Background()
	for _, req := range []Request{
		{User: "alice", IP: "192.0.2.1", Method: "GET", Route: "/r7"},  // route + method + always: 4 tiers
		{User: "alice", IP: "192.0.2.1", Method: "HEAD", Route: "/r7"}, // HEAD through GET
		{User: "alice", IP: "192.0.2.1", Method: "PUT", Route: "/r7"},  // always only
		{User: "alice", IP: "192.0.2.1", Method: "", Route: "/pkg.S/M"},
	} {
		if _, err := l.Allow(ctx, req); err != nil { // create the buckets
			t.Fatal(err)
		}
		if got := testing.AllocsPerRun(100, func() { l.Allow(ctx, req) }); got != 0 {
			t.Errorf("Allow(%s %s) makes %v allocations, want 0", req.Method, req.Route, got)
		}
	}
	// And a denying decision.
	deny := newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerDay(1), 1), Routes: []string{"GET /x"}},
		Rule{Name: "per-user", Scope: ScopeUser, Limit: big})
	req := Request{User: "alice", Method: "GET", Route: "/x"}
	deny.Allow(ctx, req)
	if got := testing.AllocsPerRun(100, func() { deny.Allow(ctx, req) }); got != 0 {
		t.Errorf("denying Allow(GET /x) makes %v allocations, want 0", got)
	}
}
