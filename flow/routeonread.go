package flow

import (
	"net/http"

	"github.com/bucketry/ratelimit/keyfuncs"
)

// RouteOnRead is the part of a net/http request view whose route a router
// finds, at the cost of a match of the request's path (nethttp around a
// ServeMux, chi before it routes): the pattern is looked for when first
// read, which Check does only when the policy needs the route, and a key,
// plan, cost or skip function may. Once found, and until Done, the
// request's Pattern holds it, so that a function of the *http.Request
// itself reads it there; Done gives the request the Pattern it came with,
// which the router sets again when it dispatches. The view's Route reads
// it with RoutePattern, which records a read of a route that cannot be
// told, for RouteReadUnknown (see RouteReadReporter). The zero value is
// ready for Begin; a RouteOnRead is used by one goroutine at a time.
type RouteOnRead struct {
	r           *http.Request
	find        func(*http.Request) (pattern string, known bool)
	came        string
	resolved    bool
	known       bool
	readUnknown bool
}

// Begin prepares p for r, the pattern of whose route find returns, with
// whether it can tell ("" for no route). find is called at most once, on
// r; it should be made once per handler, not per request, which would
// allocate.
func (p *RouteOnRead) Begin(r *http.Request, find func(*http.Request) (pattern string, known bool)) {
	*p = RouteOnRead{r: r, find: find, came: r.Pattern}
}

// Pattern returns the pattern of the request's route and whether it is
// known, looking for it on the first call.
func (p *RouteOnRead) Pattern() (pattern string, known bool) {
	if !p.resolved {
		p.r.Pattern, p.known = p.find(p.r)
		p.resolved = true
	}
	return p.r.Pattern, p.known
}

// RoutePattern returns the pattern of the request's route, for the view's
// Route, and records a read of the route while it is unknown.
func (p *RouteOnRead) RoutePattern() string {
	pattern, known := p.Pattern()
	if !known {
		p.readUnknown = true
	}
	return pattern
}

// RouteReadUnknown reports whether RoutePattern was called, since Begin,
// while the route is unknown.
func (p *RouteOnRead) RouteReadUnknown() bool { return p.readUnknown }

// Request returns the request, with its route's pattern in Pattern.
func (p *RouteOnRead) Request() *http.Request {
	p.Pattern()
	return p.r
}

// Resolved reports whether the pattern has been looked for since Begin.
func (p *RouteOnRead) Resolved() bool { return p.resolved }

// Done gives the request its Pattern back and empties p.
func (p *RouteOnRead) Done() {
	if p.resolved {
		p.r.Pattern = p.came
	}
	*p = RouteOnRead{}
}

// OnReadView is an adapter's view of a request, embedding the
// RouteOnRead that finds its route, for CheckOnRead: SetRequest makes it
// the view of r, or with nil of no request.
type OnReadView interface {
	keyfuncs.Request
	SetRequest(r *http.Request)
	onRead() *RouteOnRead
}

// onRead returns p, for the OnReadView that embeds it.
func (p *RouteOnRead) onRead() *RouteOnRead { return p }

// CheckOnRead checks r into res through v, an adapter's view, made the
// view of r for the check and of none after it, whose route find looks for
// only when something reads it, and reports whether it did.
func (e *Engine) CheckOnRead(v OnReadView, r *http.Request, find func(*http.Request) (pattern string, known bool), res *Result) (looked bool) {
	v.SetRequest(r)
	o := v.onRead()
	o.Begin(r, find)
	e.Check(v, res)
	looked = o.Resolved()
	o.Done()
	v.SetRequest(nil)
	return looked
}
