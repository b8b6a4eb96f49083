package nethttp

import (
	"net/http"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

// TestMuxViewAsksWhenRead: around a ServeMux, the middleware asks it for a
// request's pattern only when something reads the route (a second match
// of the path per request otherwise); see flowtest.CheckRouteOnRead.
func TestMuxViewAsksWhenRead(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})
	flowtest.CheckRouteOnRead(t, "/items/1", "GET /items/{id}", WithKeyFunc, func(t *testing.T, l *core.Limiter, opts ...flow.Option) func(*http.Request, *flow.Result) bool {
		m, err := New(l, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m.Handler(mux).(*handler).checkOnRead
	})
}
