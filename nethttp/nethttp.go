package nethttp

import (
	"net/http"
	"reflect"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// Middleware limits the requests of the handlers it wraps with one
// core.Limiter and one set of options. Build it once with New and wrap each
// route's handler with Handler. A Middleware is immutable and safe for
// concurrent use.
type Middleware struct {
	engine  *flow.Engine
	deny    DenyHandler  // nil: the problem body
	onError ErrorHandler // nil: the status text
}

// New returns a Middleware that limits requests with limiter. It fails with
// an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option, an option of another adapter, a scope given two key
// functions, or an enabled rule of the limiter's policy whose scope has no
// key function.
//
// New returns a type rather than a bare func(http.Handler) http.Handler so
// that one validated configuration can wrap many handlers; its Handler
// method has that signature, for routers that take middleware functions.
func New(limiter *core.Limiter, opts ...Option) (*Middleware, error) {
	// Names spelled as http.Header stores them, which spares a
	// canonicalization per field and response.
	canonical := flow.WithHeaderOptions(core.WithNameCase(core.NamesCanonical))
	e, err := flow.New(limiter, adapter, []flow.Option{canonical}, opts...)
	if err != nil {
		return nil, err
	}
	m := &Middleware{engine: e}
	m.deny, m.onError = flow.Handlers[DenyHandler, ErrorHandler](e)
	return m, nil
}

// Handler returns a handler that limits requests and passes those allowed
// to next. Its signature is the usual net/http middleware's, so it also
// fits routers that take func(http.Handler) http.Handler.
//
// For each request it derives the keys, plan and cost, asks the limiter
// (waiting out a shaping delay), and then:
//
//   - allowed: sets the rate-limit header fields (see
//     flow.WithHeadersOnAllow), replacing any set before, and calls next;
//   - denied: sets the header fields, Retry-After and Cache-Control, and
//     answers 429 with an application/problem+json quota-exceeded body, or
//     503 when the store failed and the limiter fails closed (see
//     WithDenyHandler); next is not called;
//   - skipped (flow.WithSkip): calls next, with no header fields;
//   - not decidable: calls the error handler (see WithErrorHandler); next is
//     not called.
//
// The route (the endpoint scope's key, and what core.Rule.Routes select)
// is the ServeMux pattern of the route the request reaches, without its
// method ("/items/{id}"), and none for a request the mux answers itself
// (404, 405, and the redirects it makes to a path with a final "/" or a
// clean one). Install the middleware once, around the whole
// mux, m.Handler(mux): it asks the mux which pattern the request matches
// (http.ServeMux.Handler) before the mux dispatches it, and limits
// stricter routes with rules limited to them. It asks only when something
// reads the route (a rule limited to routes, an endpoint rule, a When
// predicate, a key function given per route, the limiter's observers, or
// a function of the service's that asks), sparing a second match of the
// path otherwise. Wrapping each route's handler,
// mux.Handle("GET /items/{id}", m.Handler(h)), works too: the
// mux has set the pattern by then. Around any other handler the route is
// unknown, and a request to which a rule that needs it could apply, or
// whose key, plan, cost or skip function reads it, fails with
// flow.ErrRouteUnknown through the error handler, rather than skipping
// that tier.
//
// A request passes the middleware once: if it runs again on the same
// request (around the mux and around a route), the second run calls next
// without charging; a second Middleware over the same limiter fails the
// request with flow.ErrInstalledTwice, as does the middleware of a gin,
// Echo or fiber app over it behind this one. The record of a pass travels
// in a copy of the request with a new context, made only while another
// middleware exists over the limiter (Handler calls, of any Middleware
// over it, chi's included, and gin, Echo and fiber middlewares): with
// none, next gets the request as it came, which spares two allocations
// per request. Handler panics if next is nil, as
// http.ServeMux.Handle does, when the route is wired rather than under
// load.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("nethttp: Handler: nil next handler")
	}
	h := &handler{m: m, next: next}
	if mux, ok := next.(*http.ServeMux); ok {
		h.find = func(r *http.Request) (string, bool) { return muxPattern(mux, r), true }
	}
	m.engine.HandlerMade()
	return h
}

// redirectType is the type of the handlers http.RedirectHandler makes.
var redirectType = reflect.TypeOf(http.RedirectHandler("/", http.StatusTemporaryRedirect))

// muxPattern returns the pattern of the route mux dispatches r to, or ""
// when it answers r itself: not found, method not allowed, or a redirect
// it makes for the request (to the path with a final "/", or to the clean
// path), for which http.ServeMux.Handler reports the pattern of a route
// the request does not reach, or for CONNECT the path itself, which the
// client chooses. The mux makes a new redirect handler each time it is
// asked, where a route's own redirect handler is the same one: a second
// look tells them apart, on redirects only.
func muxPattern(mux *http.ServeMux, r *http.Request) string {
	h, p := mux.Handler(r)
	if reflect.TypeOf(h) == redirectType {
		if again, _ := mux.Handler(r); again != h {
			return ""
		}
	}
	return p
}

type handler struct {
	m    *Middleware
	next http.Handler
	// find asks next, when it is a ServeMux, for the pattern of a
	// request's route; nil otherwise.
	find func(*http.Request) (pattern string, known bool)
}

// ServeHTTP limits one request.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	prev := flow.MarkFrom(r.Context())
	var res flow.Result
	if m.engine.Seen(prev, &res) {
		h.answer(w, r, &res, r)
		return
	}
	// The request next gets: when another handler over the limiter could
	// see it after this one, a copy whose context records this
	// middleware; otherwise r itself.
	marked := m.engine.MarkRequest(r, prev)
	if h.find != nil || marked.Pattern == "" {
		h.checkOnRead(marked, &res)
	} else {
		m.engine.Check(request{marked}, &res)
	}
	h.answer(w, r, &res, marked)
}

// answer acts on res: next gets marked, handlers r.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, res *flow.Result, marked *http.Request) {
	h.m.engine.AnswerHTTP(w, r, res, h.next, marked, h.m.deny, h.m.onError)
}

// checkOnRead checks marked into res through a view from muxViews, whose
// route h.find looks for only when something reads it, and reports
// whether it did. Without h.find, outside a ServeMux route, the route
// cannot be told.
func (h *handler) checkOnRead(marked *http.Request, res *flow.Result) (looked bool) {
	find := h.find
	if find == nil {
		find = outsideMux
	}
	v := muxViews.Get().(*muxView)
	looked = h.m.engine.CheckOnRead(v, marked, find, res)
	muxViews.Put(v)
	return looked
}

// outsideMux is the route of a request no ServeMux has matched, around a
// handler that is not one: unknown.
func outsideMux(*http.Request) (string, bool) { return "", false }
