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
// which the router sets again when it dispatches. The zero value is ready
// for Begin; a RouteOnRead is used by one goroutine at a time.
type RouteOnRead struct {
	r        *http.Request
	find     func(*http.Request) (pattern string, known bool)
	came     string
	resolved bool
	known    bool
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

// CheckOnRead checks r into res through v, a request view of r embedding
// o, whose route find looks for only when something reads it, and reports
// whether it did: Begin, Check and Done in their order, for the adapters
// whose views embed a RouteOnRead.
func (e *Engine) CheckOnRead(v keyfuncs.Request, o *RouteOnRead, r *http.Request, find func(*http.Request) (pattern string, known bool), res *Result) (looked bool) {
	o.Begin(r, find)
	e.Check(v, res)
	looked = o.Resolved()
	o.Done()
	return looked
}
