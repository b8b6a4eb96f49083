package chilimit

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-chi/chi/v5"
)

// Where the middleware sits in chi decides what it can see of the route:
//
//   - r.Use on the root router runs before chi has matched anything:
//     chi.Context.RoutePatterns is empty. The route is found by asking the
//     router, chi.Routes.Find on the path chi will route.
//   - r.With or a Group's r.Use runs in the route's own chain, after chi
//     has matched it: RoutePatterns is complete, and chi.Context.RoutePattern
//     is the route.
//   - r.Use in a mounted router (r.Route, r.Mount), or r.With on a Mount,
//     runs after the parent routers have matched the mount ("/api/*") and
//     before the mounted router matches the rest: RoutePatterns holds the
//     mounts, and the route is found by asking the mounted router for the
//     rest of the path.
//   - Around a chi router, m.Handler(r), that router routes the request
//     next: the route is found by asking it, after what chi has matched,
//     if anything.
//
// Telling the second and third apart, and finding the mounted router,
// takes the routers' tables (chi.Routes.Routes), which the resolver reads
// once per router and again when one does not place a pattern chi matched
// (a route added since). They also correct one thing Find does not do as
// chi's routing does: a path that is the root of a mounted router ("/api"
// or "/api/" for r.Route("/api", ...)) matches the mount's stub, where
// Find stops with the pattern "/api", while chi goes on into the mounted
// router at "/", which may have no route there (404 or 405), or one whose
// pattern is not "/" ("/*").
//
// The pattern is always joined by chi.Context.RoutePattern, which drops a
// final "/" and the "/*" of each mount ("/api/*" and "/items/{id}/" make
// "/api/items/{id}"), on a scratch context when the resolver found the
// patterns, so that every installation reports the route chi reports once
// it has routed the request.

// resolver finds the chi pattern of the route a request reaches. It is
// safe for concurrent use.
type resolver struct {
	// scratch holds *chi.Context values for Find, which writes the match
	// into the context it is given: never the request's own.
	scratch sync.Pool
	mu      sync.Mutex                              // held to replace tables
	tables  atomic.Pointer[map[*chi.Mux]routeTable] // copy on write
}

// routeTable is one router's routes, chi.Routes.Routes indexed by pattern.
type routeTable map[string]chi.Route

// maxTables bounds how many routers' tables a resolver keeps: a service has
// a few, and past the bound a table is read again each time it is needed.
const maxTables = 1024

// maxDepth bounds how many mounted routers resolve follows from one stub
// to the next, against routers mounted in a cycle.
const maxDepth = 32

// kind is what a pattern is in its router, for one method.
type kind uint8

const (
	// unplaced: not in the router's table, even read again.
	unplaced kind = iota
	// endpoint: a route's handler, or a handler mounted with Mount that is
	// not a chi router: routing ends there.
	endpoint
	// mount: "/api/*", where a chi router is mounted: routing goes on in
	// it, at the rest of the path.
	mount
	// stub: "/api" or "/api/", the root of a chi router mounted at "/api":
	// routing goes on in it at "/".
	stub
)

// context returns a chi.Context for Find, reset.
func (rs *resolver) context() *chi.Context {
	x, _ := rs.scratch.Get().(*chi.Context)
	if x == nil {
		return chi.NewRouteContext()
	}
	x.Reset()
	return x
}

// table returns the routes of level, read again when fresh. The tables of
// chi's own *chi.Mux are kept; another chi.Routes is read each time.
func (rs *resolver) table(level chi.Routes, fresh bool) routeTable {
	for {
		rh, ok := level.(routerHandler)
		if !ok {
			break
		}
		level = rh.routes // the router the middleware wraps
	}
	mx, ok := level.(*chi.Mux)
	if !ok {
		return readTable(level)
	}
	if !fresh {
		if m := rs.tables.Load(); m != nil {
			if t, ok := (*m)[mx]; ok {
				return t
			}
		}
	}
	t := readTable(level)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	old := rs.tables.Load()
	n := 0
	if old != nil {
		n = len(*old)
		if _, ok := (*old)[mx]; !ok && n >= maxTables {
			return t
		}
	}
	m := make(map[*chi.Mux]routeTable, n+1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[mx] = t
	rs.tables.Store(&m)
	return t
}

func readTable(level chi.Routes) routeTable {
	routes := level.Routes()
	t := make(routeTable, len(routes))
	for _, rt := range routes {
		t[rt.Pattern] = rt
	}
	return t
}

// classify says what pattern is in level for method, with the mounted
// router of a mount or stub. A router's table is read once and kept; a
// pattern it does not place (a route added since) has it read again.
func (rs *resolver) classify(level chi.Routes, pattern, method string) (kind, chi.Routes) {
	for _, fresh := range [2]bool{false, true} {
		t := rs.table(level, fresh)
		if rt, ok := t[pattern]; ok {
			if rt.SubRoutes != nil {
				return mount, rt.SubRoutes
			}
			// chi.Routes lists a stub's pattern only with the handlers
			// registered there besides the mount's.
			if rt.Handlers[method] != nil {
				return endpoint, nil
			}
		}
		if !strings.HasSuffix(pattern, "*") {
			// Mount("/api", h) registers "/api", "/api/" and "/api/*".
			at := pattern + "/*"
			if strings.HasSuffix(pattern, "/") {
				at = pattern + "*"
			}
			if rt, ok := t[at]; ok {
				if rt.SubRoutes != nil {
					return stub, rt.SubRoutes
				}
				return endpoint, nil // the stub of a handler that is not a router
			}
		}
	}
	return unplaced, nil
}

// walk returns the router that matched the last of patterns, the patterns
// chi matched in turn from root, each but the last a mount or a stub; false
// when one is neither.
func (rs *resolver) walk(root chi.Routes, patterns []string, method string) (chi.Routes, bool) {
	level := root
	for _, p := range patterns {
		k, sub := rs.classify(level, p, method)
		if k != mount && k != stub {
			return nil, false
		}
		level = sub
	}
	return level, true
}

// resolve returns chi's pattern of the route that level reaches for method
// and path, after matched, the patterns chi has matched before level (as
// chi.Context.RoutePattern joins them: "/api/items/{id}"), or "" when no
// route matches.
func (rs *resolver) resolve(level chi.Routes, matched []string, method, path string) string {
	x := rs.context()
	defer rs.scratch.Put(x)
	x.RoutePatterns = append(x.RoutePatterns, matched...)
	for depth := 0; depth < maxDepth; depth++ {
		start := len(x.RoutePatterns)
		// Find appends the pattern of each router it matches in to
		// x.RoutePatterns, and returns "" when none matches to the end.
		if level.Find(x, method, path) == "" {
			return ""
		}
		found := x.RoutePatterns[start:]
		if len(found) == 0 {
			break
		}
		last, ok := rs.walk(level, found[:len(found)-1], method)
		if !ok {
			break // the tables disagree with Find: keep what Find found
		}
		k, sub := rs.classify(last, found[len(found)-1], method)
		if k != stub {
			break
		}
		// Find stopped at the root of a mounted router: chi routes the
		// request into it at "/".
		level, path = sub, "/"
	}
	return x.RoutePattern()
}

// route returns chi's pattern of the route r reaches, "" for none, and
// whether the middleware can tell, when the middleware runs on r with next
// after it (next, when a chi router, is routes).
func (rs *resolver) route(r *http.Request, routes chi.Routes) (pattern string, known bool) {
	rctx := chi.RouteContext(r.Context())
	method := r.Method
	var matched []string
	if rctx != nil {
		matched = rctx.RoutePatterns
		if rctx.RouteMethod != "" {
			method = rctx.RouteMethod // middleware.GetHead routes HEAD as GET
		}
	}
	switch {
	case routes != nil:
		// The middleware wraps a chi router: it routes the request next,
		// as Mux.routeHTTP does, after whatever matched before.
		return rs.resolve(routes, matched, method, routePath(rctx, r)), true
	case rctx == nil || rctx.Routes == nil:
		return "", false // outside chi
	case len(matched) == 0:
		// r.Use on the root router, before it routes.
		return rs.resolve(rctx.Routes, nil, method, routePath(rctx, r)), true
	}
	if level, ok := rs.walk(rctx.Routes, matched[:len(matched)-1], method); ok {
		switch k, sub := rs.classify(level, matched[len(matched)-1], method); k {
		case stub:
			return rs.resolve(sub, matched, method, "/"), true
		case mount:
			return rs.resolve(sub, matched, method, mountPath(rctx)), true
		}
	}
	// r.With or a Group's middleware: chi has matched the route. Or the
	// router that goes on is out of sight, mounted through a handler that
	// is not a chi router (r.Mount("/admin", auth(admin))), which
	// chi.Routes.Find does not see through either: the route is what chi
	// has matched, the mount's.
	return rctx.RoutePattern(), true
}

// routePath returns the path the next router routes, as Mux.routeHTTP
// chooses it: the routing path a mount or a middleware set, else the
// request's.
func routePath(rctx *chi.Context, r *http.Request) string {
	if rctx != nil && rctx.RoutePath != "" {
		return rctx.RoutePath
	}
	if r.URL != nil {
		if r.URL.RawPath != "" {
			return r.URL.RawPath
		}
		if r.URL.Path != "" {
			return r.URL.Path
		}
	}
	return "/"
}

// mountPath returns the path a router mounted at the last of
// rctx.RoutePatterns ("/api/*") routes: the rest of the path, which the
// mount's catch-all parameter holds until the mount's handler runs (r.With
// on the Mount) and then moves to rctx.RoutePath, emptying the parameter
// (r.Use in the mounted router).
func mountPath(rctx *chi.Context) string {
	keys, vals := rctx.URLParams.Keys, rctx.URLParams.Values
	if n := len(keys) - 1; n >= 0 && n < len(vals) && keys[n] == "*" && vals[n] != "" {
		return "/" + vals[n]
	}
	if rctx.RoutePath != "" {
		return rctx.RoutePath
	}
	return "/"
}
