package flow

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
)

// Adapters report routes in the form every adapter shares, documented at
// core.ParseRoute: the path template with each wildcard in braces, no
// method. These functions turn a router's own template into it, and cache
// what they built, so that a request costs a map lookup and no
// allocation.

// ColonRoute returns the route of a template in the syntax of gin, fiber,
// Echo and httprouter: ":name" becomes "{name}", ":name?" "{name?}",
// "*name" "{name...}", and a bare "*" or "+" "{*}" or "{+}". A constraint
// (fiber's ":id<int>") is dropped: "{id}". "" stays "".
func ColonRoute(template string) string { return colonRoutes.get(template, colonRoute) }

// BraceRoute returns the route of a template in chi's syntax: regular
// expressions are dropped, "{id:[0-9]+}" becomes "{id}" (within a segment
// too: "{id:[0-9]+}.json" becomes "{id}.json"), and a bare "*" becomes
// "{*}". "" stays "".
func BraceRoute(template string) string { return braceRoutes.get(template, braceRoute) }

// MuxRoute returns the route of a net/http ServeMux pattern,
// "[METHOD ][HOST]/[PATH]": the pattern without its method ("GET
// /items/{id}" becomes "/items/{id}"); wildcards are already in braces.
// "" stays "".
func MuxRoute(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return strings.TrimLeft(pattern[i:], " \t")
	}
	return pattern
}

func colonRoute(t string) string {
	segs := strings.Split(t, "/")
	for i, s := range segs {
		if s == "" {
			continue
		}
		switch s[0] {
		case ':':
			name := s[1:]
			opt := ""
			if j := strings.IndexByte(name, '<'); j >= 0 {
				name = name[:j] // fiber's constraint
			}
			if strings.HasSuffix(name, "?") {
				name, opt = name[:len(name)-1], "?"
			}
			segs[i] = "{" + name + opt + "}"
		case '*':
			if s == "*" {
				segs[i] = "{*}"
			} else {
				segs[i] = "{" + s[1:] + "...}"
			}
		case '+':
			if s == "+" {
				segs[i] = "{+}"
			}
		}
	}
	return strings.Join(segs, "/")
}

func braceRoute(t string) string {
	var b strings.Builder
	depth, skip := 0, false
	for i := 0; i < len(t); i++ {
		c := t[i]
		switch {
		case c == '{':
			depth++
		case c == '}' && depth > 0:
			depth--
			if depth == 0 {
				skip = false
			}
		case c == ':' && depth == 1:
			skip = true // a regular expression, to the closing brace
		}
		if !skip || (c == '}' && depth == 0) {
			b.WriteByte(c)
		}
	}
	segs := strings.Split(b.String(), "/")
	for i, s := range segs {
		if s == "*" {
			segs[i] = "{*}"
		}
	}
	return strings.Join(segs, "/")
}

// routeCache maps router templates to routes. The map is replaced whole on
// insertion (copy on write), so lookups take no lock; templates are the
// server's own, a small fixed set, and past maxRoutes the route is built on
// every call instead of stored.
type routeCache struct {
	mu sync.Mutex
	m  atomic.Pointer[map[string]string]
}

const maxRoutes = 4096

var colonRoutes, braceRoutes routeCache

func (c *routeCache) get(t string, build func(string) string) string {
	if t == "" {
		return ""
	}
	if m := c.m.Load(); m != nil {
		if r, ok := (*m)[t]; ok {
			return r
		}
	}
	r := build(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	if old != nil && len(*old) >= maxRoutes {
		return r
	}
	m := make(map[string]string, 1+lenOf(old))
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[strings.Clone(t)] = r
	c.m.Store(&m)
	return r
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// RouteReporter is implemented by the request views of adapters whose
// middleware can run where the route is not known yet (before the router
// has matched it, as a ServeMux wrapped whole or fiber's app.Use may).
// RouteKnown reports whether Route says which route the request will
// reach, "" meaning none; when it reports false, the Engine refuses to
// decide a request to which a rule that needs the route could apply.
type RouteReporter interface {
	RouteKnown() bool
}

// RouteReadReporter is a RouteReporter that records whether its Route was
// read while the route is unknown, since it became the view of its
// request: RouteReadUnknown reports it. A key, plan, cost or skip function
// that reads the route (keyfuncs.MethodAndRoute, a Compose of it), or a
// When predicate that reads it through the view, would read "" as no
// route and key, or skip, a tier on that: the Engine fails the request
// with ErrRouteUnknown instead. RouteOnRead records the reads of the
// views that embed it (RoutePattern).
type RouteReadReporter interface {
	RouteReporter
	RouteReadUnknown() bool
}

// ErrRouteUnknown is wrapped by the error of a request whose route the
// middleware cannot tell, where it is installed, when something needs it:
// a rule with Routes, an endpoint rule keyed by the route, a key function
// given per route (WithRouteKey), or a function that reads the route
// through the view (see RouteReadReporter). Its tier would otherwise
// silently not apply. The request fails (500 through the error handler)
// and the first such error of each middleware is logged.
var ErrRouteUnknown = errors.New("ratelimit: route unknown where the middleware runs")

// ErrInstalledTwice is wrapped by the error of a request that two
// middlewares over one limiter checked, installed at two levels (the
// router and a route): each would charge every tier they share. Install
// one middleware, at the router level, and scope stricter tiers to routes
// with core.Rule.Routes. The same middleware installed twice is not an
// error: it checks the request once.
var ErrInstalledTwice = errors.New("ratelimit: two middlewares over one limiter on one request")
