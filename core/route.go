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
// segment in a router's own syntax (":id", "*path") is an error naming
// the brace form, for it would never match. A GET selector also selects
// HEAD requests, which routers serve with the GET route's handler. The
// error wraps ErrInvalidRule.
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
	for _, seg := range strings.Split(route, "/") {
		if seg == "" {
			continue
		}
		switch seg[0] {
		case ':':
			return fmt.Errorf("segment %q: write wildcards in braces, {%s}", seg, strings.TrimSuffix(seg[1:], "?"))
		case '*':
			if seg == "*" {
				return fmt.Errorf("segment %q: write a catch-all as {*}", seg)
			}
			return fmt.Errorf("segment %q: write a catch-all as {%s...}", seg, seg[1:])
		}
	}
	return nil
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
