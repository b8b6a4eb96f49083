package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/conformance"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow/flowtest"
	ginlimit "github.com/bucketry/ratelimit/gin"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

// TestMain puts gin in test mode: no debug lines for each route.
func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

// serveGin is the conformance harness: a gin engine on an httptest server,
// each route with its own middleware before its handler, at the route's
// colon pattern. Paths no route matches get gin's 404.
func serveGin(t testing.TB, routes []conformance.HTTPRoute) string {
	t.Helper()
	engine := gin.New()
	for _, rt := range routes {
		opts := append([]ginlimit.Option(nil), rt.Options...)
		if h := rt.NativeUserHeader; h != "" {
			opts = append(opts, ginlimit.WithKeyFunc(core.ScopeUser, func(c *gin.Context) (string, error) {
				if v := c.GetHeader(h); v != "" {
					return v, nil
				}
				return "", keyfuncs.ErrNotApplicable
			}))
		}
		if answer := rt.DenyResponse; answer != nil {
			opts = append(opts, ginlimit.WithDenyHandler(func(c *gin.Context, d *core.Decision) {
				status, body := answer(d)
				c.Data(status, "text/plain; charset=utf-8", []byte(body))
			}))
		}
		if answer := rt.ErrorResponse; answer != nil {
			opts = append(opts, ginlimit.WithErrorHandler(func(c *gin.Context, err error) {
				status, body := answer(err)
				c.Data(status, "text/plain; charset=utf-8", []byte(body))
			}))
		}
		mw, err := ginlimit.New(rt.Limiter, opts...)
		if err != nil {
			t.Fatalf("ginlimit.New for %s %s: %v", rt.Method, rt.Pattern, err)
		}
		next := rt.Handler
		engine.Handle(rt.Method, rt.ColonPattern(), mw, func(c *gin.Context) {
			if next != nil {
				next()
			}
			c.String(http.StatusOK, "ok")
		})
	}
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveApp is the harness of a whole application: one middleware on the
// engine, engine.Use, before the routes.
func serveApp(t testing.TB, app conformance.HTTPApp) string {
	t.Helper()
	opts := append([]ginlimit.Option(nil), app.Options...)
	if app.Auth {
		a := conformance.NewAuthFuncs(func(c *gin.Context, name string) string { return c.GetString(name) })
		opts = append(opts, ginlimit.WithKeyFunc(core.ScopeUser, a.User), ginlimit.WithPlanFunc(a.Plan),
			ginlimit.WithCostFunc(a.Cost), ginlimit.WithSkipFunc(a.Skip))
	}
	mw, err := ginlimit.New(app.Limiter, opts...)
	if err != nil {
		t.Fatalf("ginlimit.New: %v", err)
	}
	engine := gin.New()
	if app.Auth {
		engine.Use(auth)
	}
	engine.Use(mw)
	var route []gin.HandlerFunc
	if app.Twice {
		route = append(route, mw)
	}
	if app.Second != nil {
		second, err := ginlimit.New(app.Limiter, app.Second...)
		if err != nil {
			t.Fatalf("ginlimit.New (second): %v", err)
		}
		route = append(route, second)
	}
	for _, rt := range app.Routes {
		next := rt.Handler
		handlers := append(append([]gin.HandlerFunc(nil), route...), func(c *gin.Context) {
			if next != nil {
				next()
			}
			c.String(http.StatusOK, "ok")
		})
		engine.Handle(rt.Method, rt.ColonPattern(), handlers...)
	}
	srv := httptest.NewServer(engine)
	t.Cleanup(srv.Close)
	return srv.URL
}

// auth moves authFields from the header into the gin.Context (c.Set), as
// an authentication middleware stores the user it found.
func auth(c *gin.Context) {
	for _, name := range conformance.AuthFields {
		if v := c.GetHeader(name); v != "" {
			c.Set(name, v)
			c.Request.Header.Del(name)
		}
	}
	c.Next()
}

func TestConformance(t *testing.T) {
	// gin routes HEAD only to HEAD routes: a HEAD to a GET route is a 404.
	conformance.RunHTTPSuite(t, conformance.HTTPHarness{Serve: serveGin, ServeApp: serveApp})
}

// TestBesideNetHTTP: a net/http middleware over the limiter of the gin
// middleware, around the engine or inside it (gin.WrapH), fails the
// request with flow.ErrInstalledTwice rather than charge it twice; see
// flowtest.CheckBesideNetHTTP.
func TestBesideNetHTTP(t *testing.T) {
	flowtest.CheckBesideNetHTTP(t, []string{"around", "inside"}, func(t *testing.T, way string, l, other *core.Limiter, failed func(error)) int {
		mw, err := ginlimit.New(l, ginlimit.WithErrorHandler(func(c *gin.Context, err error) {
			failed(err)
			c.String(http.StatusInternalServerError, "failed")
		}))
		if err != nil {
			t.Fatal(err)
		}
		m, err := nethttp.New(other, nethttp.WithErrorHandler(flowtest.HTTPErrorHandler(failed)))
		if err != nil {
			t.Fatal(err)
		}
		engine := gin.New()
		engine.Use(mw)
		var h http.Handler = engine
		if way == "inside" {
			engine.GET("/x", gin.WrapH(m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))))
		} else {
			engine.GET("/x", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
			h = m.Handler(engine)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/x", nil))
		return w.Code
	})
}
