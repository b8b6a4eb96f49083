// Package flowtest holds the test helpers every framework adapter of
// ratelimit shares: a limiter from rules, the check that a constructor
// refuses bad options, and a benchmark loop for net/http handlers with the
// tiers the benchmarks limit by. It imports only the standard library,
// core and flow, so an adapter's own tests use it without adding a
// dependency to the adapter's module.
package flowtest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// Limiter returns a limiter of rules on a new in-memory store, failing tb
// if the rules are invalid.
func Limiter(tb testing.TB, rules ...core.Rule) *core.Limiter {
	tb.Helper()
	return LimiterWith(tb, nil, rules...)
}

// LimiterWith returns a limiter of rules with opts (core.WithStore, ...),
// failing tb if the rules or the options are invalid.
func LimiterWith(tb testing.TB, opts []core.Option, rules ...core.Rule) *core.Limiter {
	tb.Helper()
	return PlanLimiter(tb, core.Plans{}, opts, rules...)
}

// PlanLimiter returns a limiter of rules with plans and opts, failing tb if
// they are invalid.
func PlanLimiter(tb testing.TB, plans core.Plans, opts []core.Option, rules ...core.Rule) *core.Limiter {
	tb.Helper()
	p, err := core.NewPlanPolicy(plans, rules...)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := core.NewLimiter(p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// PerUser is a rule on the user scope: 1 per minute, burst 1.
var PerUser = core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 1)}

// Constructor describes an adapter's constructor for CheckConstructor.
type Constructor struct {
	// Adapter is the name the adapter gives flow.New ("nethttp").
	Adapter string
	// New calls the constructor with limiter and opts and returns its
	// error.
	New func(limiter *core.Limiter, opts ...flow.Option) error
	// UserKey is the adapter's WithKeyFunc for core.ScopeUser, valid.
	UserKey flow.Option
	// Invalid are options the constructor must refuse, given after
	// UserKey, each under a text its error must contain: the adapter's own
	// options given a nil function or an invalid value, by name
	// ("WithDenyHandler"), and any other case of the adapter's (another
	// adapter's key function, by the error's words).
	Invalid map[string]flow.Option
}

// CheckConstructor checks that c refuses, with an error wrapping
// core.ErrInvalidOption that says what is wrong: a nil limiter, a nil
// option (named by its position among the caller's options, whatever
// defaults the adapter adds, first or not), an option of another adapter,
// an enabled rule whose scope has no key function, and each of c.Invalid;
// and that it accepts c.UserKey with flow's options.
func CheckConstructor(t *testing.T, c Constructor) {
	t.Helper()
	l := Limiter(t, PerUser)
	other := "otheradapter"
	tests := []struct {
		name string
		l    *core.Limiter
		opts []flow.Option
		in   string // in the message
	}{
		{"nil limiter", nil, []flow.Option{c.UserKey}, "nil limiter"},
		{"nil option", l, []flow.Option{c.UserKey, nil}, "option 1 is nil"},
		{"nil first option", l, []flow.Option{nil, c.UserKey}, "option 0 is nil"},
		{"another adapter's option", l, []flow.Option{c.UserKey, flow.DenyHandler(other, func() {})},
			fmt.Sprintf("%s.WithDenyHandler is an option of %s, given to %s", other, other, c.Adapter)},
		{"no key for a rule", l, nil, `rule "per-user" limits scope "user"`},
	}
	for name, o := range c.Invalid {
		tests = append(tests, struct {
			name string
			l    *core.Limiter
			opts []flow.Option
			in   string
		}{"invalid " + name, l, []flow.Option{c.UserKey, o}, name})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := c.New(tc.l, tc.opts...)
			if !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("New = %v; want ErrInvalidOption mentioning %q", err, tc.in)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		if err := c.New(l, c.UserKey, flow.WithHeaderOptions(), flow.WithHeadersOnAllow(false)); err != nil {
			t.Fatalf("New with valid options: %v", err)
		}
	})
}

// ErrorOf returns the Constructor.New of an adapter's constructor fn,
// which returns a middleware (a handler, an interceptor: a function or a
// pointer) and an error: fn's error, or, when fn returned both a
// middleware and an error, or neither, an error saying so that does not
// wrap core.ErrInvalidOption.
func ErrorOf[M any](fn func(*core.Limiter, ...flow.Option) (M, error)) func(*core.Limiter, ...flow.Option) error {
	return func(l *core.Limiter, opts ...flow.Option) error {
		m, err := fn(l, opts...)
		v := reflect.ValueOf(&m).Elem()
		null := (v.Kind() == reflect.Func || v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil()
		switch {
		case err != nil && !null:
			return fmt.Errorf("a non-nil %T with the error %v", m, err)
		case err == nil && null:
			return fmt.Errorf("a nil %T and no error", m)
		}
		return err
	}
}

// NilOptions returns the Constructor.Invalid of the options every adapter
// has, given nil: its WithKeyFunc (for any scope), WithDenyHandler and
// WithErrorHandler. Add an adapter's other cases to the map.
func NilOptions(keyFunc, denyHandler, errorHandler flow.Option) map[string]flow.Option {
	return map[string]flow.Option{
		"WithKeyFunc":      keyFunc,
		"WithDenyHandler":  denyHandler,
		"WithErrorHandler": errorHandler,
	}
}

// BenchRules returns the tiers of the HTTP adapters' benchmarks, as most
// services have: per-ip and per-endpoint, with limits no benchmark
// reaches.
func BenchRules() []core.Rule {
	lots := core.TokenBucket(core.PerSecond(1<<20), 1<<30)
	return []core.Rule{
		{Name: "per-ip", Scope: core.ScopeIP, Limit: lots},
		{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lots},
	}
}

// ResponseWriter is an http.ResponseWriter for benchmarks, reused across
// iterations: its header map is cleared, not remade, so that the
// allocations counted are the handler's, not the writer's.
type ResponseWriter struct {
	H      http.Header
	Status int
}

// Header returns w.H.
func (w *ResponseWriter) Header() http.Header { return w.H }

// Write discards b.
func (w *ResponseWriter) Write(b []byte) (int, error) { return len(b), nil }

// WriteHeader records status.
func (w *ResponseWriter) WriteHeader(status int) { w.Status = status }

// Reset clears the header and the status.
func (w *ResponseWriter) Reset() {
	clear(w.H)
	w.Status = 0
}

// BenchHandler benchmarks h serving the requests request makes, serially
// and in parallel, as two sub-benchmarks named name+"/serial" and
// name+"/parallel", failing when a response's status is not status. Each
// parallel goroutine gets its own request from request(n), n counting
// from 1; the serial run uses request(0). Every writer serves one request
// before the timing starts (a denied case's one token).
func BenchHandler(b *testing.B, name string, h http.Handler, status int, request func(n int) *http.Request) {
	b.Run(name+"/serial", func(b *testing.B) {
		r := request(0)
		w := &ResponseWriter{H: http.Header{}}
		h.ServeHTTP(w, r)
		b.ReportAllocs()
		for b.Loop() {
			w.Reset()
			h.ServeHTTP(w, r)
			if w.Status != status {
				b.Fatalf("status %d, want %d", w.Status, status)
			}
		}
	})
	b.Run(name+"/parallel", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := request(int(n.Add(1)))
			w := &ResponseWriter{H: http.Header{}}
			h.ServeHTTP(w, r)
			for pb.Next() {
				w.Reset()
				h.ServeHTTP(w, r)
				if w.Status != status {
					b.Errorf("status %d, want %d", w.Status, status)
					return
				}
			}
		})
	})
}

// CheckRouteOnRead checks an adapter's view of a request whose route a
// router finds when first read (flow.RouteOnRead), on a GET of path whose
// route is "/items/{id}" and whose pattern, as the router spells it, is
// pattern: the route is looked for only when something reads it (not for
// a policy of one per-ip rule; for an endpoint rule, a rule of the route
// and a key function of the *http.Request), what reads it gets it (that
// key function finds pattern in r.Pattern), and the request has its own
// Pattern back once the view is done. withKey is the adapter's WithKeyFunc.
// start builds the adapter's middleware over l with opts and returns
// check, which checks a request into res through the view as the
// middleware does and reports whether the route was looked for, once the
// view is done.
func CheckRouteOnRead(t *testing.T, path, pattern string, withKey func(core.Scope, func(*http.Request) (string, error)) flow.Option, start func(t *testing.T, l *core.Limiter, opts ...flow.Option) (check func(r *http.Request, res *flow.Result) (looked bool))) {
	t.Helper()
	lim := core.TokenBucket(core.PerMinute(100), 100)
	perIP := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: lim}
	var seen string
	native := func(r *http.Request) (string, error) {
		seen = r.Pattern
		return "user-1", nil
	}
	for _, tc := range []struct {
		name   string
		rules  []core.Rule
		native bool
		asked  bool
	}{
		{"per-ip only", []core.Rule{perIP}, false, false},
		{"an endpoint rule", []core.Rule{perIP, {Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: lim}}, false, true},
		{"a rule of the route", []core.Rule{perIP, {Name: "items", Scope: core.ScopeIP, Routes: []string{"/items/{id}"}, Limit: lim}}, false, true},
		{"a key function of the request", []core.Rule{perIP, {Name: "per-user", Scope: core.ScopeUser, Limit: lim}}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []flow.Option
			if tc.native {
				opts = append(opts, withKey(core.ScopeUser, native))
			}
			check := start(t, Limiter(t, tc.rules...), opts...)
			seen = ""
			r := httptest.NewRequest(http.MethodGet, path, nil)
			r.Pattern = "before"
			var res flow.Result
			asked := check(r, &res)
			if res.Outcome != flow.Proceed || res.Decision.NumTiers() != len(tc.rules) {
				t.Fatalf("Check = %v with %d tiers (%v); want Proceed with %d", res.Outcome, res.Decision.NumTiers(), res.Err, len(tc.rules))
			}
			if asked != tc.asked {
				t.Errorf("the route looked for: %v, want %v", asked, tc.asked)
			}
			if tc.native && seen != pattern {
				t.Errorf("the key function read r.Pattern %q, want %q", seen, pattern)
			}
			if r.Pattern != "before" {
				t.Errorf("r.Pattern = %q after, want it as it came", r.Pattern)
			}
		})
	}
}

// CheckBesideNetHTTP checks that an adapter's middleware and a net/http
// one (nethttp's, chilimit's) over one limiter, on the way of one request,
// fail it with flow.ErrInstalledTwice and charge its tier once, rather
// than each charging it; and that over two limiters each charges it. For
// each of ways, the adapter's names of how its app and a net/http
// middleware go together ("around": the net/http one around the app),
// serve serves one request through the adapter's middleware over l and
// the net/http one over other put together that way, each giving the
// error of a request it cannot decide to failed and answering 500, and
// returns the status.
func CheckBesideNetHTTP(t *testing.T, ways []string, serve func(t *testing.T, way string, l, other *core.Limiter, failed func(error)) (status int)) {
	t.Helper()
	rule := core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 10)}
	for _, way := range ways {
		for _, same := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s, one limiter %v", way, same), func(t *testing.T) {
				l, other := Limiter(t, rule), Limiter(t, rule)
				if same {
					other = l
				}
				var got error
				status := serve(t, way, l, other, func(err error) { got = err })
				switch {
				case same && (status != http.StatusInternalServerError || !errors.Is(got, flow.ErrInstalledTwice)):
					t.Errorf("one limiter: %d, %v; want 500, flow.ErrInstalledTwice", status, got)
				case !same && (status != http.StatusOK || got != nil):
					t.Errorf("two limiters: %d, %v; want 200", status, got)
				}
				for _, l := range []*core.Limiter{l, other} {
					if d, err := l.AllowN(context.Background(), core.Request{}, 0); err != nil || d.Remaining != 9 {
						t.Errorf("the global bucket: remaining %d, %v; want 9, charged once", d.Remaining, err)
					}
				}
			})
		}
	}
}

// HTTPErrorHandler returns an error handler of net/http's shape, for
// CheckBesideNetHTTP, that gives the error to failed and answers 500.
func HTTPErrorHandler(failed func(error)) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, _ *http.Request, err error) {
		failed(err)
		http.Error(w, "failed", http.StatusInternalServerError)
	}
}
