package fiberlimit

import (
	"context"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// request is the keyfuncs.Request view of a *fiber.Ctx. A struct of one
// pointer is stored in an interface as the pointer itself, so making the
// view costs nothing: no copy, no allocation, no pool. It is used only
// while the middleware runs, never after: fiber reuses the Ctx, and
// fasthttp the request's buffers, for the next request once the handlers
// return.
//
// Unlike net/http, fasthttp hands out strings and byte slices that alias
// those buffers (fiber's c.Get, c.Method, c.Params, ... unless the app is
// Immutable). Every string this view returns is therefore either owned by
// the app (the route template, a method constant) or a fresh copy, because
// key functions may return it as a key, which the store keeps.
type request struct{ c *fiber.Ctx }

var (
	_ keyfuncs.Request       = request{}
	_ flow.RouteReadReporter = (*useView)(nil)
)

// Context returns c.UserContext(): context.Background() unless a handler
// before the middleware set one with c.SetUserContext (fiber's timeout
// middleware, an authentication middleware). fasthttp does not cancel it
// when the client goes away. It reads the context where fiber keeps it
// (userContextKey) rather than call c.UserContext, which stores
// Background as a user value of a request that has none: one more value
// for every later c.Locals to pass over, and for fasthttp to check for
// io.Closer when the request ends.
func (v request) Context() context.Context {
	if !userContextKnown {
		return v.c.UserContext()
	}
	if ctx, ok := v.c.Context().UserValue(userContextKey).(context.Context); ok {
		return ctx
	}
	return context.Background()
}

// userContextKey is the name of the fasthttp request's user value in which
// fiber v2 keeps the context c.SetUserContext sets (its own unexported
// userContextKey). userContextKnown says whether it is: New checks it
// once, on a Ctx of an app of its own, before any request; if a fiber
// release keeps the context elsewhere, Context calls c.UserContext().
// TestUserContextKey fails then.
const userContextKey = "__local_user_context__"

var (
	userContextOnce  sync.Once
	userContextKnown bool
)

// checkUserContextKey sets userContextKnown.
func checkUserContextKey() {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	fctx := new(fasthttp.RequestCtx)
	c := app.AcquireCtx(fctx)
	defer app.ReleaseCtx(c)
	probe := &probeContext{context.Background()}
	c.SetUserContext(probe)
	got, _ := fctx.UserValue(userContextKey).(*probeContext)
	userContextKnown = got == probe
}

// probeContext is the context checkUserContextKey looks for.
type probeContext struct{ context.Context }

// Method returns the request's method: one of the constants of the standard
// methods, or a copy of any other.
func (v request) Method() string {
	switch m := v.c.Method(); m {
	case fiber.MethodGet:
		return fiber.MethodGet
	case fiber.MethodHead:
		return fiber.MethodHead
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodDelete:
		return fiber.MethodDelete
	case fiber.MethodConnect:
		return fiber.MethodConnect
	case fiber.MethodOptions:
		return fiber.MethodOptions
	case fiber.MethodTrace:
		return fiber.MethodTrace
	default:
		return strings.Clone(m)
	}
}

// useOffset is the offset in fiber.Route of its unexported "use" field,
// which marks the routes that Use registers, or ^uintptr(0) if this fiber
// has no such field. fiber exports nothing else that tells a Use route from a
// route: Use routes get the Method of each method's stack, and a Path that
// is only a prefix. The field is found once, with reflect, and read at its
// offset, which costs a load; TestUseRoute fails if a fiber release drops
// it.
var useOffset = func() uintptr {
	f, ok := reflect.TypeFor[fiber.Route]().FieldByName("use")
	if !ok || f.Type.Kind() != reflect.Bool || len(f.Index) != 1 {
		return ^uintptr(0)
	}
	return f.Offset
}()

// isUse says whether rt was registered by Use.
func isUse(rt *fiber.Route) bool {
	return rt != nil && useOffset != ^uintptr(0) && *(*bool)(unsafe.Add(unsafe.Pointer(rt), useOffset))
}

// Route returns the route of the fiber route that matched, in the shared
// form ("/api/items/{id}" for "/api/items/:id", with the prefix of its
// groups and mounts; see flow.ColonRoute), or "" outside any route (fiber's
// c.Route() then falls back to the request's path, with no handlers). In a
// Use route the middleware uses useView instead, which finds the route
// the request will reach.
func (v request) Route() string {
	rt := v.c.Route()
	if len(rt.Handlers) == 0 || isUse(rt) {
		return ""
	}
	return flow.ColonRoute(rt.Path)
}

// RouteKnown reports true: outside a Use route, fiber has matched the
// route, or none.
func (v request) RouteKnown() bool { return true }

// useView is the view of a request in Use route rt (app.Use, group.Use),
// with the route it will reach, found by resolve when first asked for: the
// Engine asks only for a policy that needs the route, and a key, plan or
// skip function may. The middleware takes one from usePool per such
// request.
type useView struct {
	request
	rt          *fiber.Route
	route       string
	known       bool
	resolved    bool
	readUnknown bool // Route was read, and the route cannot be told
}

func (v *useView) resolve() {
	if !v.resolved {
		v.route, v.known = resolve(v.c, v.rt)
		v.resolved = true
	}
}

// Route returns the route the request will reach, or "" for none or when
// it cannot be told, which it records for RouteReadUnknown.
func (v *useView) Route() string {
	v.resolve()
	v.readUnknown = v.readUnknown || !v.known
	return v.route
}

// RouteReadUnknown reports whether Route was read while the route cannot
// be told: the request then fails with flow.ErrRouteUnknown.
func (v *useView) RouteReadUnknown() bool { return v.readUnknown }

// RouteKnown reports whether resolve could tell the route.
func (v *useView) RouteKnown() bool {
	v.resolve()
	return v.known
}

// FullMethod returns "": this is HTTP.
func (v request) FullMethod() string { return "" }

// RemoteAddr returns the TCP peer, "ip:port" (a fresh string), as fasthttp
// reports it. Deliberately not c.IP() or c.IPs(): which proxies to believe
// is keyfuncs.ClientIP's configuration, not the app's ProxyHeader.
func (v request) RemoteAddr() string {
	if ap, ok := v.PeerAddr(); ok {
		// One allocation where TCPAddr.String takes two.
		var buf [64]byte // "[" + 39 for IPv6 + zone + "]:65535" mostly fits
		return string(ap.AppendTo(buf[:0]))
	}
	return v.c.Context().RemoteAddr().String()
}

// PeerAddr returns the TCP peer as the address fasthttp holds
// (keyfuncs.PeerAddrRequest), an IPv4 address in its 16-byte form as IPv4,
// as TCPAddr.String prints it; false for a peer that is not one. ClientIP
// reads it rather than RemoteAddr, whose text would be formatted only to be
// parsed again.
func (v request) PeerAddr() (netip.AddrPort, bool) {
	// tcp.AddrPort(), but for its WithZone call, which only an address
	// with a zone needs.
	if tcp, ok := v.c.Context().RemoteAddr().(*net.TCPAddr); ok && tcp != nil {
		if a, ok := netip.AddrFromSlice(tcp.IP); ok {
			if tcp.Zone != "" {
				a = a.WithZone(tcp.Zone)
			}
			return netip.AddrPortFrom(a.Unmap(), uint16(tcp.Port)), true
		}
	}
	return netip.AddrPort{}, false
}

// Values returns every line of the request header name, in the order
// received, copied out of fasthttp's buffers: one string holds them all and
// the returned slice points into it, so a hit costs two allocations and a
// miss none. fasthttp normalizes both the stored names and the name looked
// up, so the match is case-insensitive; when the app sets
// DisableHeaderNormalizing, names are compared with ASCII case folding
// instead.
func (v request) Values(name string) []string {
	h := &v.c.Request().Header
	if srv := v.c.App().Server(); srv == nil || !srv.DisableHeaderNamesNormalizing {
		return copyLines(h.PeekAll(name))
	}
	// Stored as received: fold case, in two passes over the header (count,
	// then copy) rather than gathering slices that VisitAll may reuse.
	var n, size int
	h.VisitAll(func(k, val []byte) {
		if equalFold(k, name) {
			n++
			size += len(val)
		}
	})
	if n == 0 {
		return nil
	}
	var b strings.Builder
	b.Grow(size)
	ends := make([]int, 0, n)
	h.VisitAll(func(k, val []byte) {
		if equalFold(k, name) && len(ends) < n {
			b.Write(val)
			ends = append(ends, b.Len())
		}
	})
	return split(b.String(), ends)
}

// copyLines returns a copy of lines as strings that share one backing
// string, or nil when there are none.
func copyLines(lines [][]byte) []string {
	if len(lines) == 0 {
		return nil
	}
	size := 0
	for _, l := range lines {
		size += len(l)
	}
	var b strings.Builder
	b.Grow(size)
	for _, l := range lines {
		b.Write(l)
	}
	all := b.String()
	out := make([]string, len(lines))
	off := 0
	for i, l := range lines {
		out[i] = all[off : off+len(l)]
		off += len(l)
	}
	return out
}

// split cuts all at ends, the end offset of each part.
func split(all string, ends []int) []string {
	out := make([]string, len(ends))
	off := 0
	for i, e := range ends {
		out[i] = all[off:e]
		off = e
	}
	return out
}

// equalFold says whether k and name are equal under ASCII case folding, as
// HTTP field names compare (RFC 9110 section 5.1).
func equalFold(k []byte, name string) bool {
	if len(k) != len(name) {
		return false
	}
	for i := range k {
		a, b := k[i], name[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

// Native returns the Ctx, for key functions given with WithKeyFunc, which
// copies the key they return.
func (v request) Native() *fiber.Ctx { return v.c }
