package nethttp

import (
	"errors"
	"net/http"
	"sync"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// Middleware limits the requests of the handlers it wraps with one
// core.Limiter and one set of options. Build it once with New and wrap each
// route's handler with Handler. A Middleware is immutable and safe for
// concurrent use.
type Middleware struct {
	flow    *keyfuncs.Middleware
	deny    func(http.ResponseWriter, *http.Request, *core.Decision) // nil: the problem body
	onError func(http.ResponseWriter, *http.Request, error)          // nil: the status text
	bodies  sync.Pool                                                // *[]byte, for problem bodies
}

// canonicalFormat is the default header format: every field, with names
// spelled as http.Header stores them.
func canonicalFormat() (*core.HeaderFormat, error) {
	return core.NewHeaderFormat(core.WithNameCase(core.NamesCanonical))
}

// New returns a Middleware that limits requests with limiter. It fails with
// an error wrapping core.ErrInvalidOption for a nil limiter, a nil or
// invalid option, a scope given two key functions, or an enabled rule of the
// limiter's policy whose scope has no key function.
//
// New returns a type rather than a bare func(http.Handler) http.Handler so
// that one validated configuration can wrap many handlers; its Handler
// method has that signature, for routers that take middleware functions.
func New(limiter *core.Limiter, opts ...Option) (*Middleware, error) {
	var cfg config
	for i, o := range opts {
		if o == nil {
			cfg.fail("option %d is nil", i)
			continue
		}
		o.apply(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	f, err := canonicalFormat()
	if err != nil {
		return nil, err
	}
	// The default first: a WithHeaderFormat among opts, applied later, wins.
	shared := append([]keyfuncs.Option{keyfuncs.WithHeaderFormat(f)}, cfg.shared...)
	flow, err := keyfuncs.NewMiddleware(limiter, shared...)
	if err != nil {
		return nil, err
	}
	m := &Middleware{flow: flow, deny: cfg.deny, onError: cfg.onError}
	m.bodies.New = func() any {
		b := make([]byte, 0, 512)
		return &b
	}
	return m, nil
}

// Handler returns a handler that limits requests and passes those allowed
// to next. Its signature is the usual net/http middleware's, so it also
// fits routers that take func(http.Handler) http.Handler.
//
// For each request it derives the keys, plan and cost, asks the limiter
// (waiting out a shaping delay), and then:
//
//   - allowed: sets the rate-limit header fields (see WithHeadersOnAllow),
//     replacing any set before, and calls next;
//   - denied: sets the header fields, Retry-After and Cache-Control, and
//     answers 429 with an application/problem+json quota-exceeded body, or
//     503 when the store failed and the limiter fails closed (see
//     WithDenyHandler); next is not called;
//   - skipped (WithSkip): calls next, with no header fields;
//   - not decidable: calls the error handler (see WithErrorHandler); next is
//     not called.
//
// The endpoint scope is keyed by the ServeMux pattern, which the mux sets
// just before it calls the route's handler: wrap each route's handler,
// mux.Handle("GET /items/{id}", m.Handler(h)), not the mux itself, or the
// endpoint tiers will not apply. Handler panics if next is nil, as
// http.ServeMux.Handle does, when the route is wired rather than under load.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("nethttp: Handler: nil next handler")
	}
	return &handler{m: m, next: next}
}

type handler struct {
	m    *Middleware
	next http.Handler
}

// ServeHTTP limits one request.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	res := m.flow.Check(request{r})
	switch {
	case res.Err != nil:
		m.fail(w, r, res.Err)
	case !res.Proceed:
		m.reject(w, r, &res)
	default:
		m.flow.SetHTTPHeaders(w.Header(), &res)
		h.next.ServeHTTP(w, r)
	}
}

// maxPooledBody is the largest problem-body buffer kept for reuse.
const maxPooledBody = 16 << 10

// reject answers a request that may not proceed.
func (m *Middleware) reject(w http.ResponseWriter, r *http.Request, res *keyfuncs.Result) {
	m.flow.SetHTTPHeaders(w.Header(), res)
	if m.deny != nil {
		d := res.Decision // the handler's own copy
		m.deny(w, r, &d)
		return
	}
	bp := m.bodies.Get().(*[]byte)
	status, ctype, body := m.flow.Denial((*bp)[:0], res)
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(status)
	// A write error means the client is gone; there is nobody to tell.
	_, _ = w.Write(body)
	if cap(body) <= maxPooledBody {
		*bp = body[:0]
		m.bodies.Put(bp)
	}
}

// fail answers a request that could not be decided.
func (m *Middleware) fail(w http.ResponseWriter, r *http.Request, err error) {
	if m.onError != nil {
		m.onError(w, r, err)
		return
	}
	status := m.flow.ErrorStatus(err)
	if status == 0 {
		return // the request's context ended: the client is gone
	}
	// The status text only: err may name keys, rules or a store address.
	http.Error(w, http.StatusText(status), status)
}
