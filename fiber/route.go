package fiberlimit

import (
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/bucketry/ratelimit/flow"
)

// A middleware installed with app.Use (or group.Use) runs in a Use route,
// before fiber has matched the route the request will reach: c.Route() is
// the Use route, a prefix. The route is then found as fiber finds it: the
// first route after the Use route in the stack of the request's method
// that is not a Use route and whose path matches the request's, with the
// app's CaseSensitive and StrictRouting settings. Fiber exports its routes
// (App.Stack) but not its matcher, so the paths are matched here, as
// fiber v2 matches them (Route.match and routeParser.getMatch), for the
// syntax whose matching is plain: static segments, whole-segment
// parameters (":id"), and a final wildcard ("*" or "+"). A route of any
// other syntax (an optional parameter, a constraint, a parameter within a
// segment, an escape) met before the match makes the route unknown rather
// than guessed: see RouteKnown.

// resolve returns the route the request in Use route rt will reach, in
// the shared form, and whether it could tell.
func resolve(c *fiber.Ctx, rt *fiber.Route) (route string, known bool) {
	app := c.App()
	cfg := app.Config()
	// fiber's detection path: lower case (ASCII only) unless
	// CaseSensitive, and without its trailing slashes unless
	// StrictRouting, which leaves "" of a path of slashes.
	path := c.Path()
	if !cfg.CaseSensitive {
		path = lowerASCII(path)
	}
	if !cfg.StrictRouting && len(path) > 1 {
		path = strings.TrimRight(path, "/")
	}
	for _, stack := range app.Stack() {
		pos := -1
		for i, r := range stack {
			if r == rt {
				pos = i
				break
			}
		}
		if pos < 0 {
			continue
		}
		for _, r := range stack[pos+1:] {
			if isUse(r) {
				continue
			}
			ok, plain := matchPath(r.Path, path, cfg.CaseSensitive, cfg.StrictRouting)
			if !plain {
				return "", false
			}
			if ok {
				return flow.ColonRoute(r.Path), true
			}
		}
		return "", true // no route matches: fiber answers 404 (or 405)
	}
	return "", false // rt is in no stack: not this app's route
}

// matchPath reports whether fiber routes path, its detection path, to a
// route registered at pattern, and whether the pattern is of the plain
// syntax that matchPath follows.
func matchPath(pattern, path string, caseSensitive, strict bool) (match, plain bool) {
	if !caseSensitive {
		pattern = lowerASCII(pattern)
	}
	if !strict && len(pattern) > 1 {
		pattern = strings.TrimRight(pattern, "/")
	}
	if !isPlain(pattern) {
		return false, false
	}
	first := strings.IndexAny(pattern, ":*+")
	switch {
	case pattern == "/*":
		return true, true // fiber's star route: every path
	case first < 0:
		return pattern == path, true // "/" too: fiber's root route
	}
	// fiber files a route under the first three bytes of its constant
	// prefix, when that has three, and looks among a request's routes only
	// under the first three of its path: "/a/*" is never found for "/a".
	if prefix := pattern[:first]; len(prefix) >= 3 && (len(path) < 3 || path[:3] != prefix[:3]) {
		return false, true
	}
	// Failing the parameters, fiber compares the path with the pattern as
	// it is.
	return matchParams(pattern, path) || pattern == path, true
}

// matchParams is fiber's routeParser.getMatch for a plain pattern with
// parameters. A constant part matches as it is, or without its final "/"
// where the path ends and the pattern does too or goes on with "*" (fiber's
// optional slash). ":name" takes the path up to the first occurrence of
// the next constant part, trimmed of its final slashes (fiber's compare
// part), and nothing if a "/" comes before it; none of it is no match. A
// final ":name" takes the path to its next "/", a final "+" what is left if
// that is not nothing, and a final "*" what is left.
func matchParams(pattern, path string) bool {
	for pattern != "" {
		if i := strings.IndexAny(pattern, ":*+"); i != 0 {
			c := pattern
			if i > 0 {
				c = pattern[:i]
			}
			pattern = pattern[len(c):]
			optional := c[len(c)-1] == '/' && (pattern == "" || pattern[0] == '*')
			switch {
			case optional && path == c[:len(c)-1]:
				path = ""
			case strings.HasPrefix(path, c):
				path = path[len(c):]
			default:
				return false
			}
			continue
		}
		switch pattern[0] {
		case '*':
			return true
		case '+':
			return path != ""
		}
		end := strings.IndexByte(pattern, '/')
		if end < 0 {
			return path != "" && strings.IndexByte(path, '/') < 0
		}
		pattern = pattern[end:]
		n := paramLen(path, comparePart(pattern))
		if n == 0 {
			return false
		}
		path = path[n:]
	}
	return path == ""
}

// comparePart returns fiber's compare part of the constant part that
// pattern starts with: up to the next parameter, without its final
// slashes unless it is one byte.
func comparePart(pattern string) string {
	if i := strings.IndexAny(pattern, ":*+"); i >= 0 {
		pattern = pattern[:i]
	}
	if len(pattern) > 1 {
		pattern = strings.TrimRight(pattern, "/")
	}
	return pattern
}

// paramLen is fiber's findParamLen for a parameter followed by the
// constant part whose compare part is cp.
func paramLen(path, cp string) int {
	if len(cp) == 1 {
		if i := strings.IndexByte(path, cp[0]); i >= 0 {
			return i
		}
		return len(path)
	}
	i := strings.Index(path, cp)
	switch {
	case i < 0:
		return len(path)
	case strings.IndexByte(path[:i], '/') >= 0:
		return 0
	}
	return i
}

// isPlain reports whether pattern is of the syntax matchPath follows:
// segments that are static (none of ":*+\\" and, to be sure, "?<>()"),
// ":name" (a name without "-", "." or "~", which end or may end a fiber
// parameter), or a final "*" or "+".
func isPlain(pattern string) bool {
	if pattern != "" && pattern[0] != '/' {
		return false
	}
	for pattern != "" {
		seg, rest, more := cutSegment(pattern)
		switch {
		case seg == "*" || seg == "+":
			if more {
				return false
			}
		case strings.ContainsAny(seg, "*+\\?<>()"):
			return false
		case strings.HasPrefix(seg, ":"):
			if len(seg) == 1 || strings.ContainsAny(seg[1:], ":.-~") {
				return false
			}
		case strings.Contains(seg, ":"):
			return false
		}
		pattern = rest
	}
	return true
}

// cutSegment splits "/a/b" into "a", "/b", true; "/a" into "a", "",
// false; "" or "/" into "", "", false.
func cutSegment(p string) (seg, rest string, more bool) {
	p = strings.TrimPrefix(p, "/")
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:], true
	}
	return p, "", false
}

// lowerASCII returns s with its ASCII letters in lower case, as fiber
// lowers paths and patterns (not other letters), and s itself when it
// has none in upper case.
func lowerASCII(s string) string {
	i := 0
	for i < len(s) && !('A' <= s[i] && s[i] <= 'Z') {
		i++
	}
	if i == len(s) {
		return s
	}
	b := []byte(s)
	for ; i < len(b); i++ {
		if 'A' <= b[i] && b[i] <= 'Z' {
			b[i] += 'a' - 'A'
		}
	}
	return string(b)
}
