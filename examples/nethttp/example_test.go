package main

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

// The quick start: net/http routes limited per user, by plan, and globally.
// A free user's third request within the minute gets 429.
func Example_quickStart() {
	policy, err := core.NewPlanPolicy(core.Plans{Default: "free"},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerMinute(10), 2)},
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerMinute(100), 20)},
		core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(1000), 2000)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy) // in memory; core.WithStore(store) for Redis
	if err != nil {
		log.Fatal(err)
	}
	user, err := keyfuncs.Header("X-User") // or keyfuncs.BearerToken(), keyfuncs.FromContext(key)
	if err != nil {
		log.Fatal(err)
	}
	plan, err := keyfuncs.Header("X-Plan")
	if err != nil {
		log.Fatal(err)
	}
	rl, err := nethttp.New(limiter, flow.WithKey(core.ScopeUser, user), flow.WithPlan(plan))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	// Wrap each route, not the mux: the route's pattern keys the endpoint scope.
	mux.Handle("GET /items/{id}", rl.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s", r.PathValue("id"))
	})))

	for range 3 {
		req := httptest.NewRequest("GET", "/items/42", nil)
		req.Header.Set("X-User", "ann")
		req.Header.Set("X-Plan", "free")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("RateLimit"), w.Header().Values("Retry-After"))
	}
	// Output:
	// 200 "per-user";r=1;t=6 []
	// 200 "per-user";r=0;t=12 []
	// 429 "per-user";r=0;t=6 [6]
}
