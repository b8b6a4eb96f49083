package echolimit

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
)

// Echo answers a 404 with a RouteNotFound route when one covers the
// path: e.RouteNotFound("/*", h), and the two that Group.Use registers
// for each group with middleware ("/api" and "/api/*"), so that the
// group's middleware runs for the group's 404s. The router then sets
// c.Path() to that route's template, as it does for a route the request
// matched, and nothing in the context tells the two apart. The router's
// list of routes does (Router.Routes: a RouteNotFound route has the
// method echo.RouteNotFound): the middleware keeps, for each router, a
// table of its templates built from that list.

// templates maps each template of a router's routes to the methods
// registered on it, echo.RouteNotFound among them when a RouteNotFound
// route has that template. It is never modified once built.
type templates map[string][]string

// routeTables holds the template tables of the routers a middleware has
// seen: usually one, or one per e.Host. The map is replaced whole (copy
// on write), so lookups take no lock. It is safe for concurrent use.
type routeTables struct {
	mu     sync.Mutex
	tables atomic.Pointer[map[*echo.Router]*routeTable]
}

// routeTable is the table of one router.
type routeTable struct {
	templates templates
	// extra counts the templates the table holds that the router did not
	// list when it was built (set with c.SetPath, or added with
	// Router.Add, which the list omits); past maxExtra, an unknown
	// template no longer causes a rebuild.
	extra int
}

const (
	// maxRouters bounds the routers a middleware keeps tables for; past
	// it the tables are dropped and built again as requests come.
	maxRouters = 64
	// maxExtra bounds the templates a table holds that are not routes.
	maxExtra = 256
)

// route returns template, the template c.Path() reports for a request of
// method that router matched with no 405, if a route of that method has
// it, or when no RouteNotFound route has it; and "" when the router
// answered the request with a RouteNotFound route.
//
// The table is built on first use, and again when a template it does not
// hold comes, from a route registered since. One case it cannot see: a
// route registered, after the table was built, on a template that already
// had a RouteNotFound route and routes of other methods; it is taken for
// the RouteNotFound route until another new template comes. Register
// routes before serving, as Echo requires anyway.
func (rt *routeTables) route(router *echo.Router, method, template string) string {
	t := rt.table(router)
	methods, ok := t.templates[template]
	if !ok {
		methods = rt.rebuild(router, method, template)
	}
	if slices.Contains(methods, echo.RouteNotFound) && !slices.Contains(methods, method) {
		return ""
	}
	return template
}

// table returns router's table, building it if there is none.
func (rt *routeTables) table(router *echo.Router) *routeTable {
	if m := rt.tables.Load(); m != nil {
		if t, ok := (*m)[router]; ok {
			return t
		}
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if m := rt.tables.Load(); m != nil {
		if t, ok := (*m)[router]; ok {
			return t
		}
	}
	t := &routeTable{templates: build(router)}
	rt.store(router, t)
	return t
}

// rebuild builds router's table again for template, which its table does
// not hold, and returns the methods of template: those of a route
// registered since the table was built, or, for a template the router
// does not list, method, so that the template is taken for the route it
// is and not looked up again.
func (rt *routeTables) rebuild(router *echo.Router, method, template string) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var old *routeTable // nil if dropped meanwhile (maxRouters)
	if m := rt.tables.Load(); m != nil {
		old = (*m)[router]
	}
	if old != nil {
		if methods, ok := old.templates[template]; ok {
			return methods // rebuilt meanwhile
		}
		if old.extra >= maxExtra {
			return nil
		}
	}
	t := &routeTable{templates: build(router)}
	methods, ok := t.templates[template]
	if !ok {
		if old != nil {
			for tmpl, ms := range old.templates {
				if _, listed := t.templates[tmpl]; !listed {
					t.templates[tmpl] = ms
					t.extra++
				}
			}
		}
		methods = []string{method}
		t.templates[template] = methods
		t.extra++
	}
	rt.store(router, t)
	return methods
}

// store records router's table t; rt.mu is held.
func (rt *routeTables) store(router *echo.Router, t *routeTable) {
	m := map[*echo.Router]*routeTable{}
	if old := rt.tables.Load(); old != nil && len(*old) < maxRouters {
		for r, ot := range *old {
			m[r] = ot
		}
	}
	m[router] = t
	rt.tables.Store(&m)
}

// build returns the templates of router's routes.
func build(router *echo.Router) templates {
	t := templates{}
	for _, r := range router.Routes() {
		if !slices.Contains(t[r.Path], r.Method) {
			t[r.Path] = append(t[r.Path], r.Method)
		}
	}
	return t
}
