package core_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// The headers of a token bucket of 10 per second, burst 50: the first
// request, then the 51st of the same instant, which is denied.
func ExampleHeaderFormat_Headers() {
	policy, err := core.NewPolicy(core.Rule{Name: "api", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(10), 50)})
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	format, err := core.NewHeaderFormat()
	if err != nil {
		panic(err)
	}
	show := func(name, value string) { fmt.Printf("%s: %s\n", name, value) }

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // Unix 1767225600
	req := core.Request{User: "alice"}
	d, _ := limiter.AllowAt(context.Background(), t0, req, 1)
	format.Headers(&d, show)
	fmt.Println()
	for range 50 {
		d, _ = limiter.AllowAt(context.Background(), t0, req, 1)
	}
	format.Headers(&d, show)
	// Output:
	// X-RateLimit-Limit: 50
	// X-RateLimit-Remaining: 49
	// X-RateLimit-Reset: 1767225601
	// RateLimit-Policy: "api";q=50;w=5
	// RateLimit: "api";r=49;t=1
	//
	// X-RateLimit-Limit: 50
	// X-RateLimit-Remaining: 0
	// X-RateLimit-Reset: 1767225605
	// RateLimit-Policy: "api";q=50;w=5
	// RateLimit: "api";r=0;t=1
	// Retry-After: 1
	// Cache-Control: no-store
}

// A denied request's status and problem body, and how an adapter writes them
// with net/http. NamesCanonical lets it fill the http.Header map directly.
func ExampleHeaderFormat_AppendProblem() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(2), 4)},
		core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.FixedWindow(1000, time.Minute)},
	)
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	format, err := core.NewHeaderFormat(core.WithNameCase(core.NamesCanonical), core.WithResetFormat(core.ResetDelta))
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var d core.Decision
	for range 5 {
		d, _ = limiter.AllowAt(context.Background(), t0, core.Request{User: "alice"}, 1)
	}

	h := http.Header{}
	format.Headers(&d, func(name, value string) { h[name] = []string{value} })
	if status := format.Status(&d); status != 0 {
		h["Content-Type"] = []string{core.ContentTypeProblem}
		body := format.AppendProblem(nil, &d)
		fmt.Println(status, h.Get("Retry-After"), h.Get("X-RateLimit-Reset"))
		fmt.Println(h.Get("RateLimit-Policy"))
		fmt.Println(h.Get("Content-Type"))
		fmt.Println(string(body))
	}
	// Output:
	// 429 1 2
	// "per-user";q=4;w=2, "global";q=1000;w=60
	// application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"Rule \"per-user\" (scope user) denied the request: 0 of 4 left; retry after 1 second.","violated-policies":["per-user"]}
}

// Options select the header families; here only the draft's fields, with
// every tier in RateLimit.
func ExampleNewHeaderFormat() {
	format, err := core.NewHeaderFormat(
		core.WithXRateLimit(false),
		core.WithRateLimitTiers(core.TiersAll),
	)
	if err != nil {
		panic(err)
	}
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(1), 10)},
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(2), 3)},
		core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.FixedWindow(100, time.Minute)},
	)
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d, _ := limiter.AllowAt(context.Background(), t0, core.Request{User: "alice", Endpoint: "/search"}, 1)
	format.Headers(&d, func(name, value string) { fmt.Printf("%s: %s\n", name, value) })

	_, err = core.NewHeaderFormat(core.WithResetFormat(9))
	fmt.Println(err)
	// Output:
	// RateLimit-Policy: "per-user";q=10;w=10, "per-endpoint";q=3;w=2, "global";q=100;w=60
	// RateLimit: "per-user";r=9;t=1, "per-endpoint";r=2;t=1, "global";r=99;t=60
	// ratelimit: invalid option: WithResetFormat: want ResetUnix or ResetDelta, got ResetFormat(9)
}

// An adapter whose framework copies header bytes (fasthttp, say) formats a
// decision's fields on the stack and hands each name and value over,
// allocating nothing; the names are looked up once, at construction, in
// the framework's own spelling.
func ExampleHeaderValues() {
	policy, err := core.NewPolicy(core.Rule{Name: "api", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(10), 50)})
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	format, err := core.NewHeaderFormat(core.WithNameCase(core.NamesLower))
	if err != nil {
		panic(err)
	}
	var names [core.NumHeaderFields][]byte // at construction
	for h := range core.HeaderField(core.NumHeaderFields) {
		names[h] = []byte(h.Name(format))
	}
	set := func(name, value []byte) { fmt.Printf("%s: %s\n", name, value) }

	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // Unix 1767225600
	d, _ := limiter.AllowAt(context.Background(), t0, core.Request{User: "alice"}, 1)
	var v core.HeaderValues // per request, on the stack
	v.Format(format, &d)
	for i := range v.Len() {
		set(names[v.Field(i)], v.Bytes(i))
	}
	// Output:
	// x-ratelimit-limit: 50
	// x-ratelimit-remaining: 49
	// x-ratelimit-reset: 1767225601
	// ratelimit-policy: "api";q=50;w=5
	// ratelimit: "api";r=49;t=1
}
