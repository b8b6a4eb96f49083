package nethttp_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

// A per-client limit, installed once around the whole mux: two requests,
// then 429 with the fields that tell the client when to come back.
func Example() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(60), 2)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := nethttp.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "item %s", r.PathValue("id"))
	})
	srv := httptest.NewServer(rl.Handler(mux))
	defer srv.Close()

	for range 3 {
		resp, err := http.Get(srv.URL + "/items/42")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"))
		if resp.StatusCode == http.StatusOK {
			fmt.Println(string(body))
		} else {
			fmt.Println("Retry-After:", resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"))
		}
	}
	// Output:
	// 200 "per-ip";q=2;w=2 "per-ip";r=1;t=1
	// item 42
	// 200 "per-ip";q=2;w=2 "per-ip";r=0;t=2
	// item 42
	// 429 "per-ip";q=2;w=2 "per-ip";r=0;t=1
	// Retry-After: 1 application/problem+json
}

// Keys from two sources: the user from a header the gateway sets, read by a
// native function, and the plan from another header through a
// framework-neutral key function, which gin, fiber and gRPC middleware take
// as they are.
func ExampleWithKeyFunc() {
	policy, err := core.NewPlanPolicy(core.Plans{Default: "free"},
		core.Rule{Name: "free", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerHour(100), 1)},
		core.Rule{Name: "pro", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerHour(1000), 100)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	plan, err := keyfuncs.Header("X-Plan")
	if err != nil {
		log.Fatal(err)
	}
	rl, err := nethttp.New(limiter,
		nethttp.WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
			if u := r.Header.Get("X-Authenticated-User"); u != "" {
				return u, nil
			}
			return "", keyfuncs.ErrNotApplicable // anonymous: no per-user tier
		}),
		flow.WithPlan(plan),
	)
	if err != nil {
		log.Fatal(err)
	}
	h := rl.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	for _, who := range [][2]string{{"ann", "free"}, {"ann", "free"}, {"bob", "pro"}} {
		r := httptest.NewRequest("GET", "/report", nil)
		r.Header.Set("X-Authenticated-User", who[0])
		r.Header.Set("X-Plan", who[1])
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(who[0], w.Code, w.Header().Get("X-RateLimit-Limit"), w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// ann 200 1 0
	// ann 429 1 0
	// bob 200 100 99
}

// A deny handler that answers in the service's own format; the rate-limit
// fields, Retry-After included, are already set when it runs.
func ExampleWithDenyHandler() {
	policy, err := core.NewPolicy(core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 1)})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := nethttp.New(limiter, nethttp.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d *core.Decision) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":"slow down","tier":%q}`, d.Rule)
	}))
	if err != nil {
		log.Fatal(err)
	}
	h := rl.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		if w.Code == http.StatusOK {
			fmt.Println(w.Code)
		} else {
			fmt.Println(w.Code, "Retry-After:", w.Header().Get("Retry-After"), w.Body.String())
		}
	}
	// Output:
	// 200
	// 429 Retry-After: 60 {"error":"slow down","tier":"global"}
}
