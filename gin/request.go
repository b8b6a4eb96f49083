package ginlimit

import (
	"context"

	"github.com/gin-gonic/gin"

	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// request is the keyfuncs.Request view of a *gin.Context. A struct of one
// pointer is stored in an interface as the pointer itself, so making the
// view costs nothing: no copy, no allocation, no pool. It is used only
// while the middleware runs, never after: gin reuses the Context for
// another request once the handlers return.
type request struct{ c *gin.Context }

var _ keyfuncs.Request = request{}

// Context returns the context of the net/http request, the one that ends
// when the client goes away; not the gin.Context, whose Done is nil unless
// the engine sets ContextWithFallback.
func (v request) Context() context.Context { return v.c.Request.Context() }

// Method returns the request's method.
func (v request) Method() string { return v.c.Request.Method }

// Route returns the route of the gin route that matched, in the shared
// form ("/items/{id}" for "/items/:id", group prefix included; see
// flow.ColonRoute), or "" when none did (gin's 404 and 405 handlers, which
// run the engine's global middleware too).
func (v request) Route() string { return flow.ColonRoute(v.c.FullPath()) }

// FullMethod returns "": this is HTTP.
func (v request) FullMethod() string { return "" }

// RemoteAddr returns the TCP peer, "ip:port", as net/http reports it.
// Deliberately not c.ClientIP() or c.RemoteIP(): which proxies to believe is
// keyfuncs.ClientIP's configuration, not the engine's.
func (v request) RemoteAddr() string { return v.c.Request.RemoteAddr }

// Values returns the header's field values. The key functions of keyfuncs
// pass canonical names, which http.Header looks up without allocating.
func (v request) Values(name string) []string { return v.c.Request.Header.Values(name) }

// Native returns the gin.Context, for key functions given with WithKeyFunc.
func (v request) Native() *gin.Context { return v.c }
