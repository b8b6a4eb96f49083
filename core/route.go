package core

import (
	"fmt"
	"strings"
)

// Routes are named the same way in every adapter, so that one policy
// serves net/http, chi, gin, fiber, Echo and gRPC alike. A route is the
// template the router matched, with each wildcard segment written in
// braces whatever the router's own syntax:
//
//	router syntax                      route
//	"GET /items/{id}"   (net/http)     "/items/{id}", method GET
//	"/items/{id}"       (chi)          "/items/{id}"
//	"/items/{id:[0-9]+}" (chi regexp)  "/items/{id}"
//	"/items/:id"        (gin, fiber, Echo)  "/items/{id}"
//	"/files/*path"      (gin)          "/files/{path...}"
//	"/files/*"          (chi, fiber, Echo)  "/files/{*}"
//	"/users/:name?"     (fiber)        "/users/{name?}"
//	"/pkg.Service/Method" (gRPC)       "/pkg.Service/Method", no method
//
// Request.Route carries the route and Request.Method the HTTP method.
// The group and mount prefixes are part of the route ("/api/items/{id}"),
// and so is a net/http pattern's host ("example.com/items/{id}").

// RouteSelector picks the requests a rule applies to (Rule.Routes) or a
// route's own key function applies to (flow.WithRouteKey). Parse one with
// ParseRoute. The zero value selects nothing.
type RouteSelector struct {
	method string // "" for any
	route  string // "" for any
}

// ParseRoute parses a route selector, one of:
//
//	"GET /items/{id}"       that method on that route
//	"/items/{id}"           that route, any method
//	"POST"                  that method, any route
//	"/pkg.Service/Method"   a gRPC method
//
// Routes are written as documented above (wildcards in braces); a
// router's own syntax (":id", "*path", fiber's "+", chi's
// "{id:[0-9]+}") is an error naming the route the adapters report for
// it, for it would never match. A wildcard of names and colons alone
// ("{a:b}") is taken as fiber's adjacent parameters ("/:a:b"), which is
// how adapters report them; a chi regexp of that shape ("{ver:v1}") is not
// told apart from them, and a rule naming it never matches: write chi's
// routes as "{ver}". A GET selector also selects HEAD requests, which
// routers serve with the GET route's handler. The error wraps
// ErrInvalidRule.
func ParseRoute(s string) (RouteSelector, error) {
	method, route := "", s
	if i := strings.IndexByte(s, ' '); i >= 0 {
		method, route = s[:i], s[i+1:]
		if method == "" || route == "" {
			return RouteSelector{}, fmt.Errorf("%w: route %q: want \"METHOD /path\", \"/path\" or \"METHOD\"", ErrInvalidRule, s)
		}
	} else if !strings.Contains(s, "/") {
		method, route = s, ""
	}
	if method != "" && !isToken(method) {
		return RouteSelector{}, fmt.Errorf("%w: route %q: method %q is not an HTTP method token", ErrInvalidRule, s, method)
	}
	if route != "" {
		if err := checkRouteTemplate(route); err != nil {
			return RouteSelector{}, fmt.Errorf("%w: route %q: %v", ErrInvalidRule, s, err)
		}
	}
	if method == "" && route == "" {
		return RouteSelector{}, fmt.Errorf("%w: empty route", ErrInvalidRule)
	}
	return RouteSelector{method: method, route: route}, nil
}

// isToken reports whether s is an RFC 9110 token in upper case letters,
// as HTTP methods are written.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 'A' || c > 'Z' {
			return false
		}
	}
	return s != ""
}

func checkRouteTemplate(route string) error {
	if !strings.Contains(route, "/") {
		return fmt.Errorf("a route holds a \"/\"")
	}
	for i := 0; i < len(route); i++ {
		if c := route[i]; c <= ' ' || c == 0x7f {
			return fmt.Errorf("control character or blank at byte %d", i)
		}
	}
	// A router's own syntax never matches: the error names the route the
	// adapters report for it, built as flow.ColonRoute and flow.BraceRoute
	// build it.
	for _, seg := range strings.Split(route, "/") {
		switch {
		case seg == "":
		case seg[0] == ':':
			return fmt.Errorf("segment %q: write wildcards in braces: %q", seg, reportedRoute(route))
		case seg[0] == '*':
			return fmt.Errorf("segment %q: write a catch-all in braces: %q", seg, reportedRoute(route))
		case seg == "+":
			return fmt.Errorf("segment %q: write a greedy wildcard in braces: %q", seg, reportedRoute(route))
		}
	}
	if w := regexpWildcard(route); w != "" {
		return fmt.Errorf("wildcard %q: routes leave out chi's regular expressions: %q", w, reportedRoute(route))
	}
	return nil
}

// regexpWildcard returns the first wildcard of route written as chi's
// "{name:regexp}", where name is letters, digits and "_", or "". What
// flow.ColonRoute makes of fiber's parameters is left alone: a colon after
// other text ("/:from-:to" is "/{from-:to}"), and names, colons and a
// final "?" alone ("/:a:b", two adjacent parameters, is "/{a:b}"), which
// a regexp of chi's would match only as that literal text.
func regexpWildcard(route string) string {
	for i := 0; i < len(route); i++ {
		if route[i] != '{' {
			continue
		}
		j := i + 1
		for j < len(route) && isNameByte(route[j]) {
			j++
		}
		if j > i+1 && j < len(route) && route[j] == ':' {
			n, _ := closingBrace(route[i:])
			if !fiberParams(route[i+1 : i+n-1]) {
				return route[i : i+n]
			}
		}
	}
	return ""
}

// fiberParams reports whether s, a wildcard's text within braces, is
// made of names and colons only, with an optional final "?": adjacent
// parameters of fiber's, as flow.ColonRoute reports them.
func fiberParams(s string) bool {
	s = strings.TrimSuffix(s, "?")
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i]) && s[i] != ':' {
			return false
		}
	}
	return true
}

// closingBrace returns the length of the wildcard s starts with, up to its
// closing brace, nested braces (a regexp's "{3}") included, and true; or
// len(s) and false when it has none.
func closingBrace(s string) (int, bool) {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '{':
			depth++
		case '}':
			if depth--; depth == 0 {
				return i + 1, true
			}
		}
	}
	return len(s), false
}

func isNameByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// reportedRoute returns route as adapters report the route of a router
// template (flow.BraceRoute, then flow.ColonRoute): chi's regular
// expressions dropped, "{id:[0-9]+}" becoming "{id}"; and, segment by
// segment, ":name" becoming "{name}", ":name?" "{name?}", ":id<int>"
// "{id}", "*name" "{name...}", a bare "*" "{*}" and a bare "+" "{+}".
func reportedRoute(route string) string {
	var b strings.Builder
	for route != "" {
		w := regexpWildcard(route)
		if w == "" {
			b.WriteString(route)
			break
		}
		i := strings.Index(route, w)
		b.WriteString(route[:i])
		b.WriteString(w[:strings.IndexByte(w, ':')])
		if _, closed := closingBrace(w); closed {
			b.WriteByte('}')
		}
		route = route[i+len(w):]
	}
	segs := strings.Split(b.String(), "/")
	for i, s := range segs {
		switch {
		case s == "":
		case s[0] == ':':
			name, opt := s[1:], ""
			if j := strings.IndexByte(name, '<'); j >= 0 {
				name = name[:j] // fiber's constraint
			}
			if strings.HasSuffix(name, "?") {
				name, opt = name[:len(name)-1], "?"
			}
			segs[i] = "{" + name + opt + "}"
		case s == "*":
			segs[i] = "{*}"
		case s[0] == '*':
			segs[i] = "{" + s[1:] + "...}"
		case s == "+":
			segs[i] = "{+}"
		}
	}
	return strings.Join(segs, "/")
}

// String returns the selector as ParseRoute reads it.
func (s RouteSelector) String() string {
	switch {
	case s.method == "":
		return s.route
	case s.route == "":
		return s.method
	}
	return s.method + " " + s.route
}

// Method returns the selector's method, "" for any.
func (s RouteSelector) Method() string { return s.method }

// Route returns the selector's route, "" for any.
func (s RouteSelector) Route() string { return s.route }

// Match reports whether a request of method to route is selected. A
// request with no route (none matched) is selected only by a method-only
// selector.
func (s RouteSelector) Match(method, route string) bool {
	if s.route != "" && s.route != route {
		return false
	}
	if s.method == "" {
		return s.route != "" // the zero value selects nothing
	}
	return s.method == method || (s.method == "GET" && method == "HEAD")
}

// Covers reports whether every request s2 selects is also selected by s.
func (s RouteSelector) Covers(s2 RouteSelector) bool {
	switch {
	case s2 == RouteSelector{}:
		return true // s2 selects nothing
	case s == RouteSelector{}:
		return false
	case s.route != "" && s.route != s2.route:
		return false
	}
	return s.method == "" || s.method == s2.method || (s.method == "GET" && s2.method == "HEAD")
}
