package chilimit

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
)

// TestLazyViewResolvesWhenRead: around a chi router, the middleware asks
// it for a request's route only when something reads it; see
// flowtest.CheckRouteOnRead.
func TestLazyViewResolvesWhenRead(t *testing.T) {
	router := chi.NewRouter()
	router.Get("/items/{id}", func(http.ResponseWriter, *http.Request) {})
	flowtest.CheckRouteOnRead(t, "/items/1", "/items/{id}", WithKeyFunc, func(t *testing.T, l *core.Limiter, opts ...flow.Option) func(*http.Request, *flow.Result) bool {
		m, err := New(l, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m.Handler(router).(routerHandler).checkOnRead
	})
}
