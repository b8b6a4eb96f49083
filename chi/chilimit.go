package chilimit

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
)

// Middleware limits the requests of a chi router, group or route with one
// core.Limiter and one set of options. Build it once with New and install
// its Handler with r.Use. A Middleware is safe for concurrent use; its
// configuration is immutable after New.
type Middleware struct {
	engine  *flow.Engine
	deny    DenyHandler  // nil: the problem body
	onError ErrorHandler // nil: the status text
	routes  resolver
}

// New returns a Middleware that limits requests with limiter. It fails with
// an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option, an option of another adapter, a scope given two key
// functions, or an enabled rule of the limiter's policy whose scope has no
// key function.
//
// New returns a type rather than a bare func(http.Handler) http.Handler so
// that one validated configuration can be installed at several places; its
// Handler method has that signature, which r.Use and r.With take.
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
// to next: chi middleware, for r.Use(m.Handler) and r.With(m.Handler).
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
// is chi's pattern of the route the request reaches, with the prefixes of
// the routers it is mounted in and without regular expressions, and
// without the method: "/api/items/{id}" for "/items/{id:[0-9]+}" in a
// router mounted at "/api" (see flow.BraceRoute), "" when no route matches
// (chi's 404 and 405). Install the middleware once, on the root router
// with r.Use, before the routes: chi runs it before it routes the request,
// and the middleware asks the router which route the request will reach
// (chi.Routes.Find on the path chi will route), following mounted routers.
// Under r.With or a Group's r.Use it reads the route chi has matched;
// under r.Use in a mounted router, or r.With on a Mount, it reads the
// mounts chi has matched and asks the mounted router for the rest. Around
// a chi router, m.Handler(r), it asks that router, and the handler it
// returns is a chi.Routes too, so that the routes of a router mounted
// through it, r.Mount("/api", m.Handler(api)), stay in sight of
// chi.Routes.Find and chi.Walk. A router mounted through any other
// handler, r.Mount("/admin", auth(admin)), is out of sight, of Find as of
// the middleware: before it routes, the route is the mount's, "/admin/{*}".
// It asks only when something reads the route (a rule limited to routes,
// an endpoint rule, a When predicate, a key function given per route, the
// limiter's observers, or a function of the service's that asks), sparing
// a search of the router otherwise.
// Outside chi (around a handler that is not a chi router, with no chi
// routing context) the route is unknown, and a request to which a rule
// that needs it could apply, or whose key, plan, cost or skip function
// reads it, fails with flow.ErrRouteUnknown through the error handler,
// rather than skipping that tier. A middleware that changes
// how chi routes the request (middleware.StripSlashes,
// middleware.CleanPath, middleware.GetHead) must run before this one, as
// it would for any middleware that reads the route.
//
// A request passes the middleware once: if it runs again on the same
// request (r.Use and r.With), the second run calls next without charging;
// a second Middleware over the same limiter fails the request with
// flow.ErrInstalledTwice. Handler panics if next is nil, as chi's Mount
// does, when the route is wired rather than under load.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("chilimit: Handler: nil next handler")
	}
	m.engine.HandlerMade()
	h := &handler{m: m, next: next}
	routes, _ := next.(chi.Routes)
	h.routes = routes
	h.find = func(r *http.Request) (string, bool) { return m.routes.route(r, routes) }
	if routes != nil {
		return routerHandler{h}
	}
	return h
}

type handler struct {
	m      *Middleware
	next   http.Handler
	routes chi.Routes // next, when it is a chi router: the route is resolved through it
	// find resolves a request's route, for the view (see lazyView).
	find func(*http.Request) (pattern string, known bool)
}

// routerHandler is the handler around a chi router: a chi.Routes itself,
// whose routes are the router's, so that a router that mounts it,
// r.Mount("/api", m.Handler(api)), and chi.Walk see the routes through
// the middleware, as they see those of a router mounted bare.
type routerHandler struct{ *handler }

var _ chi.Routes = routerHandler{}

// Routes returns the wrapped router's routes.
func (h routerHandler) Routes() []chi.Route { return h.routes.Routes() }

// Middlewares returns the middleware, then the wrapped router's.
func (h routerHandler) Middlewares() chi.Middlewares {
	return append(chi.Middlewares{h.m.Handler}, h.routes.Middlewares()...)
}

// Match reports whether the wrapped router has a route for method and
// path; see chi.Routes.
func (h routerHandler) Match(rctx *chi.Context, method, path string) bool {
	return h.routes.Match(rctx, method, path)
}

// Find returns the pattern of the wrapped router's route for method and
// path; see chi.Routes.
func (h routerHandler) Find(rctx *chi.Context, method, path string) string {
	return h.routes.Find(rctx, method, path)
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
	// middleware; otherwise r itself. Once the view has resolved the
	// route, and until Check returns, its Pattern carries chi's pattern of
	// the route the request reaches; next gets the Pattern the request
	// came with, which chi sets when it routes.
	marked := m.engine.MarkRequest(r, prev)
	h.checkOnRead(marked, &res)
	h.answer(w, r, &res, marked)
}

// answer acts on res: next gets marked, handlers r.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, res *flow.Result, marked *http.Request) {
	h.m.engine.AnswerHTTP(w, r, res, h.next, marked, h.m.deny, h.m.onError)
}

// checkOnRead checks marked into res through a view from views, whose
// route h.find looks for only when something reads it, and reports
// whether it did.
func (h *handler) checkOnRead(marked *http.Request, res *flow.Result) (looked bool) {
	v := views.Get().(*lazyView)
	looked = h.m.engine.CheckOnRead(v, marked, h.find, res)
	views.Put(v)
	return looked
}
