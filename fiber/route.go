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
// (App.Stack) but not its matcher, so the paths are matched here, for the
// syntax whose matching is plain: static segments, whole-segment
// parameters (":id"), and a final wildcard ("*" or "+"). A route of any
// other syntax (an optional parameter, a constraint, a parameter within a
// segment) met before the match makes the route unknown rather than
// guessed: see RouteKnown.

// resolve returns the route the request in Use route rt will reach, in
// the shared form, and whether it could tell.
func resolve(c *fiber.Ctx, rt *fiber.Route) (route string, known bool) {
	app := c.App()
	cfg := app.Config()
	path := c.Path()
	if !cfg.CaseSensitive {
		path = strings.ToLower(path)
	}
	if !cfg.StrictRouting && len(path) > 1 {
		path = strings.TrimRight(path, "/")
		if path == "" {
			path = "/"
		}
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

// matchPath reports whether path, normalized, matches the route pattern,
// and whether the pattern is of the plain syntax that matchPath follows.
func matchPath(pattern, path string, caseSensitive, strict bool) (match, plain bool) {
	if !caseSensitive {
		pattern = strings.ToLower(pattern)
	}
	if !strict && len(pattern) > 1 {
		pattern = strings.TrimRight(pattern, "/")
		if pattern == "" {
			pattern = "/"
		}
	}
	for {
		pseg, prest, pmore := cutSegment(pattern)
		sseg, srest, smore := cutSegment(path)
		switch {
		case pseg == "*" && !pmore, pseg == "+" && !pmore:
			// The rest of the path, possibly empty for "*".
			rest := path
			return pseg == "*" || rest != "" && rest != "/", true
		case strings.ContainsAny(pseg, "*+?<>()"):
			return false, false
		case strings.HasPrefix(pseg, ":"):
			if strings.ContainsAny(pseg[1:], ":.-~") {
				return false, false // a parameter within a segment
			}
			if sseg == "" && !smore {
				return false, true
			}
		case strings.Contains(pseg, ":"):
			return false, false
		case pseg != sseg:
			return false, true
		}
		if !pmore || !smore {
			return pmore == smore, true
		}
		pattern, path = prest, srest
	}
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
