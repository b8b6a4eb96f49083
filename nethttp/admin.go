package nethttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/bucketry/ratelimit/core"
)

// Admin is an http.Handler for an operator's port: it inspects and resets
// the buckets of a limiter. Make one with NewAdmin. It has no
// authentication of its own: serve it on a port only operators reach, or
// behind the service's own authentication. It is safe for concurrent use.
//
// The request is named by query parameters, as the middleware would key it:
// user, ip, endpoint, plan, method, route, and dim.NAME for a Dimension
// scope (dim.tenant=acme). Every tier the policy applies to that request
// is concerned.
//
//   - GET: the state of each tier, read without consuming (core.Limiter.Inspect),
//     as JSON: {"tiers":[{"rule":...,"scope":...,"limit":"...","remaining":N,
//     "reset_after_seconds":S,"shadow":false}, ...]}.
//   - DELETE or POST: reset every tier's bucket to full (core.Limiter.Reset);
//     204 No Content.
//
// A request no configuration can key (an identity too long, a control
// character) is 400 with the reason; a store that cannot reset is 501; a
// store failure is 503. Any other method is 405.
type Admin struct {
	limiter *core.Limiter
}

// NewAdmin returns the admin handler of l. It fails with an error wrapping
// core.ErrInvalidOption for a nil l.
func NewAdmin(l *core.Limiter) (*Admin, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nethttp: NewAdmin: nil limiter", core.ErrInvalidOption)
	}
	return &Admin{limiter: l}, nil
}

// adminTier is one tier in the JSON answer of GET.
type adminTier struct {
	Rule       string  `json:"rule"`
	Scope      string  `json:"scope"`
	Limit      string  `json:"limit"`
	Remaining  int64   `json:"remaining"`
	ResetAfter float64 `json:"reset_after_seconds"`
	Shadow     bool    `json:"shadow"`
}

// ServeHTTP answers GET, DELETE and POST as the type's documentation says.
func (a *Admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := adminRequest(r)
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		d, err := a.limiter.Inspect(r.Context(), req)
		if err != nil {
			adminError(w, err)
			return
		}
		if d.Degraded {
			adminError(w, fmt.Errorf("%w: %w", core.ErrUnavailable, d.Err))
			return
		}
		out := struct {
			Tiers []adminTier `json:"tiers"`
		}{Tiers: []adminTier{}}
		for _, t := range d.Tiers() {
			out.Tiers = append(out.Tiers, adminTier{
				Rule: t.Rule.Name, Scope: string(t.Rule.Scope), Limit: t.Limit.String(), Remaining: t.Remaining,
				ResetAfter: t.ResetAfter.Seconds(), Shadow: t.Shadow,
			})
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(out) // a write error means the client is gone
	case http.MethodDelete, http.MethodPost:
		if err := a.limiter.Reset(r.Context(), req); err != nil {
			adminError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, HEAD, DELETE, POST")
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
	}
}

// adminRequest reads the request to inspect or reset from r's query.
func adminRequest(r *http.Request) core.Request {
	q := r.URL.Query()
	req := core.Request{
		User: q.Get("user"), IP: q.Get("ip"), Endpoint: q.Get("endpoint"), Plan: q.Get("plan"),
		Method: q.Get("method"), Route: q.Get("route"),
	}
	for name, vals := range q {
		if dim, ok := strings.CutPrefix(name, "dim."); ok && len(vals) > 0 {
			req.Dims = append(req.Dims, core.Dim{Name: dim, Value: vals[0]})
		}
	}
	return req
}

// adminError answers err with its status: the operator sees the reason.
func adminError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, core.ErrInvalidKey), errors.Is(err, core.ErrInvalidCost):
		status = http.StatusBadRequest
	case errors.Is(err, errors.ErrUnsupported):
		status = http.StatusNotImplemented
	case errors.Is(err, core.ErrUnavailable):
		status = http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, err.Error(), status)
}
