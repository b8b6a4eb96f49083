package chilimit_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"

	chilimit "github.com/bucketry/ratelimit/chi"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// A per-endpoint limit, installed once on the router: the paths of one
// route share a bucket, another route has its own, and a path no route
// matches gets chi's 404 with no rate-limit fields.
func Example() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 2)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := chilimit.New(limiter)
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(rl.Handler)
	r.Route("/api", func(r chi.Router) {
		r.Get("/items/{id:[0-9]+}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "item %s", chi.URLParam(r, "id"))
		})
		r.Get("/users/{name}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "user %s", chi.URLParam(r, "name"))
		})
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, path := range []string{"/api/items/1", "/api/items/2", "/api/items/3", "/api/users/ann", "/nowhere"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			fmt.Println(path, resp.StatusCode, string(body), resp.Header.Get("RateLimit"))
		case http.StatusTooManyRequests:
			fmt.Println(path, resp.StatusCode, resp.Header.Get("Content-Type"), "Retry-After:", resp.Header.Get("Retry-After"))
		default:
			fmt.Printf("%s %d %q\n", path, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	// Output:
	// /api/items/1 200 item 1 "per-endpoint";r=1;t=60
	// /api/items/2 200 item 2 "per-endpoint";r=0;t=120
	// /api/items/3 429 application/problem+json Retry-After: 60
	// /api/users/ann 200 user ann "per-endpoint";r=1;t=60
	// /nowhere 404 ""
}

// userKey is the context key under which the authentication middleware
// below stores the user.
type userKey struct{}

// The user an authentication middleware found, read from the request's
// context by a native key function. The authentication middleware runs
// first; anonymous requests are not limited by the per-user tier.
func ExampleWithKeyFunc() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 1)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	rl, err := chilimit.New(limiter, chilimit.WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
		if user, ok := r.Context().Value(userKey{}).(string); ok {
			return user, nil
		}
		return "", keyfuncs.ErrNotApplicable // anonymous: no per-user tier
	}))
	if err != nil {
		log.Fatal(err)
	}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if user := r.Header.Get("X-Authenticated-User"); user != "" { // a real one checks a token
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
			}
			next.ServeHTTP(w, r)
		})
	}
	r := chi.NewRouter()
	r.Use(authenticate, rl.Handler)
	r.Get("/report", func(w http.ResponseWriter, r *http.Request) {})

	for _, user := range []string{"ann", "ann", "bob", ""} {
		req := httptest.NewRequest("GET", "/report", nil)
		req.Header.Set("X-Authenticated-User", user)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Printf("%q %d %q\n", user, w.Code, w.Header().Get("RateLimit"))
	}
	// Output:
	// "ann" 200 "\"per-user\";r=0;t=60"
	// "ann" 429 "\"per-user\";r=0;t=60"
	// "bob" 200 "\"per-user\";r=0;t=60"
	// "" 200 ""
}

// A stricter limit on one route is a rule limited to it, in the shared
// route form, from the one middleware on the router: a search it denies
// takes nothing from the per-user tier. Installed again on a route, the
// same middleware does not charge twice.
func ExampleMiddleware_Handler() {
	policy, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(100), 100)},
		core.Rule{Name: "search", Scope: core.ScopeUser, Routes: []string{"GET /api/search"}, Limit: core.TokenBucket(core.PerHour(1), 1)},
	)
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		log.Fatal(err)
	}
	user, err := keyfuncs.Header("X-User")
	if err != nil {
		log.Fatal(err)
	}
	rl, err := chilimit.New(limiter, flow.WithKey(core.ScopeUser, user))
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(rl.Handler)
	r.Route("/api", func(r chi.Router) {
		r.Get("/search", func(w http.ResponseWriter, r *http.Request) {})
		r.With(rl.Handler).Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {})
	})

	for _, path := range []string{"/api/search", "/api/search", "/api/items/1"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("X-User", "ann")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(path, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /api/search 200 "per-user";q=100;w=3600, "search";q=1;w=3600 0
	// /api/search 429 "per-user";q=100;w=3600, "search";q=1;w=3600 0
	// /api/items/1 200 "per-user";q=100;w=3600 98
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
	rl, err := chilimit.New(limiter, chilimit.WithDenyHandler(func(w http.ResponseWriter, r *http.Request, d *core.Decision) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"error":"slow down","tier":%q}`, d.Rule)
	}))
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(rl.Handler)
	r.Get("/", func(w http.ResponseWriter, r *http.Request) {})
	for range 2 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
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
