package ginlimit

import (
	"errors"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// errNoRequest is what the error handler gets for a gin.Context without an
// http.Request, which only a hand-made test context can be.
var errNoRequest = errors.New("ginlimit: gin.Context has no Request")

// middleware is what the gin.HandlerFunc returned by New runs. It is
// immutable after New and safe for concurrent use.
type middleware struct {
	flow    *keyfuncs.Middleware
	deny    func(*gin.Context, *core.Decision) // nil: the problem body
	onError func(*gin.Context, error)          // nil: record, status text
	bodies  sync.Pool                          // *[]byte, for problem bodies
}

// canonicalFormat is the default header format: every field, with names
// spelled as http.Header stores them.
func canonicalFormat() (*core.HeaderFormat, error) {
	return core.NewHeaderFormat(core.WithNameCase(core.NamesCanonical))
}

// New returns gin middleware that limits requests with limiter, for
// engine.Use, RouterGroup.Use or a single route (r.GET("/search", mw, h)).
// It fails with an error wrapping core.ErrInvalidOption for a nil limiter, a
// nil or invalid option, a scope given two key functions, or an enabled rule
// of the limiter's policy whose scope has no key function. The returned
// handler is safe for concurrent use; each run of it on a request takes
// tokens, so install it once on any one chain.
//
// For each request it derives the keys, plan and cost, asks the limiter
// (waiting out a shaping delay, until the request's context ends), and
// then:
//
//   - allowed: sets the rate-limit header fields (see WithHeadersOnAllow),
//     replacing any set before, and calls c.Next;
//   - denied: aborts the chain, sets the header fields, Retry-After and
//     Cache-Control, and answers 429 with an application/problem+json
//     quota-exceeded body, or 503 when the store failed and the limiter
//     fails closed (see WithDenyHandler);
//   - skipped (WithSkip): calls c.Next, with no header fields;
//   - not decidable: aborts the chain and calls the error handler (see
//     WithErrorHandler).
func New(limiter *core.Limiter, opts ...Option) (gin.HandlerFunc, error) {
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
	m := &middleware{flow: flow, deny: cfg.deny, onError: cfg.onError}
	m.bodies.New = func() any {
		b := make([]byte, 0, 512)
		return &b
	}
	return m.handle, nil
}

// handle limits one request.
func (m *middleware) handle(c *gin.Context) {
	if c.Request == nil {
		m.fail(c, errNoRequest)
		return
	}
	res := m.flow.Check(request{c})
	switch {
	case res.Err != nil:
		m.fail(c, res.Err)
	case !res.Proceed:
		m.reject(c, &res)
	default:
		m.flow.SetHTTPHeaders(c.Writer.Header(), &res)
		c.Next()
	}
}

// maxPooledBody is the largest problem-body buffer kept for reuse.
const maxPooledBody = 16 << 10

// reject answers a request that may not proceed.
func (m *middleware) reject(c *gin.Context, res *keyfuncs.Result) {
	c.Abort()
	m.flow.SetHTTPHeaders(c.Writer.Header(), res)
	if m.deny != nil {
		// The pending status, so that a handler that writes only a body,
		// or nothing, still answers 429 (or 503), not gin's default 200.
		c.Status(m.flow.Format().Status(&res.Decision))
		d := res.Decision // the handler's own copy
		m.deny(c, &d)
		return
	}
	bp := m.bodies.Get().(*[]byte)
	status, ctype, body := m.flow.Denial((*bp)[:0], res)
	c.Header("Content-Type", ctype)
	c.Status(status)
	// A write error means the client is gone; there is nobody to tell.
	_, _ = c.Writer.Write(body)
	if cap(body) <= maxPooledBody {
		*bp = body[:0]
		m.bodies.Put(bp)
	}
}

// fail answers a request that could not be decided.
func (m *middleware) fail(c *gin.Context, err error) {
	c.Abort()
	status := m.flow.ErrorStatus(err)
	if m.onError != nil {
		if status != 0 {
			c.Status(status) // pending, as in reject
		}
		m.onError(c, err)
		return
	}
	_ = c.Error(err) // for gin's Logger and the service's error middleware
	if status == 0 {
		return // the request's context ended: the client is gone
	}
	// The status text only: err may name keys, rules or a store address.
	http.Error(c.Writer, http.StatusText(status), status)
}
