package keyfuncs

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"

	"github.com/bucketry/ratelimit/core"
)

// Request is the framework-neutral view of one request that key functions
// read. Each framework adapter implements it over its native request; it
// must be cheap: no method should allocate beyond what the framework itself
// forces. A Request is used by one goroutine at a time, for the duration of
// one key evaluation.
type Request interface {
	// Context returns the request's context (never nil): the one that
	// carries the authenticated user, deadlines and cancellation.
	Context() context.Context
	// Method returns the HTTP method ("GET"), or "" for gRPC.
	Method() string
	// Route returns the route the request matched, in the form every
	// adapter shares (core.ParseRoute): the path template with wildcards
	// in braces, without the method ("/items/{id}", for net/http's "GET
	// /items/{id}" and gin's "/items/:id" alike), or "" when no route
	// matched or the router does not say. It is never the raw request
	// path.
	Route() string
	// FullMethod returns the gRPC method, "/package.Service/Method", or ""
	// for HTTP.
	FullMethod() string
	// RemoteAddr returns the address of the TCP peer, "ip:port" or "ip"
	// (IPv6 in brackets when a port follows), as net/http's
	// Request.RemoteAddr does. It is whatever connected to the server,
	// possibly a proxy; see ClientIP.
	RemoteAddr() string
	// Values returns every value of the HTTP header or gRPC metadata key
	// name, one per field line, in the order received, or nil when absent.
	// Names are matched case-insensitively. The key functions of this
	// package pass HTTP header names in canonical form ("X-Forwarded-For",
	// as http.Header stores them) and metadata keys in lower case (as gRPC
	// stores them), so that the usual lookups need not allocate. Callers
	// must not modify the returned slice.
	Values(name string) []string
}

// PeerAddrRequest is a Request that can also give its TCP peer as an
// address, for frameworks that hold it as one (fasthttp keeps a net.Addr):
// ClientIP then reads the peer from it instead of parsing RemoteAddr's
// text, which such a framework would have to format first. PeerAddr reports
// false when the peer is not an IP address; ClientIP then reads RemoteAddr.
// Both must name the same peer. An IPv4-mapped IPv6 address counts as the
// IPv4 address, as in RemoteAddr's text.
type PeerAddrRequest interface {
	Request
	PeerAddr() (netip.AddrPort, bool)
}

// Func derives one identity of a request: a user, an address, an endpoint,
// a plan or a custom dimension. It returns ErrNotApplicable when the tier
// keyed by it does not apply to the request (an anonymous request has no
// user), and any other error when it cannot decide; adapters hand those to
// their error handler. It never returns an empty key with a nil error.
//
// Every Func of this package is safe for concurrent use. A key read from a
// header or metadata is client-controlled text: stores escape keys, and
// core rejects keys that are too long or hold control characters.
type Func func(Request) (string, error)

// ErrNotApplicable is returned by a Func when its tier does not apply to the
// request: the header, credential, route or context value it reads is
// absent. It is not a failure: the limiter skips the tier, as it does for an
// empty identity in a core.Request. The Funcs of this package return it
// unwrapped; test for it with errors.Is, which also matches custom Funcs
// that wrap it.
var ErrNotApplicable = errors.New("keyfuncs: tier does not apply")

// ErrInvalidOption is wrapped by the errors of the constructors of this
// package (ClientIP, Header, Constant, ...) when an argument or option
// cannot work. The message names the constructor or option at fault.
var ErrInvalidOption = core.ErrInvalidOption

// ErrNoAddress is wrapped by the error a ClientIP Func returns when the
// request has no client address: the TCP peer is not an IP address (a Unix
// socket or an in-memory pipe) and is not trusted with WithTrustNonIPPeer,
// or it is trusted but no proxy header names a client.
var ErrNoAddress = errors.New("keyfuncs: no client address")

// ErrValueType is wrapped by the error a FromContext Func returns when the
// context value has a type that cannot be a key.
var ErrValueType = errors.New("keyfuncs: context value is not a string or fmt.Stringer")

// Static is a Request made of plain fields, for tests and for callers with
// no framework. Its zero value is a request with nothing in it (every Func
// but Constant returns ErrNotApplicable or an error). A Static is safe for
// concurrent use as long as nobody modifies it.
type Static struct {
	// Ctx is returned by Context; nil means context.Background().
	Ctx context.Context
	// HTTPMethod is returned by Method ("GET"; "" for gRPC).
	HTTPMethod string
	// RouteTemplate is returned by Route, in the form Request.Route
	// describes and core.ParseRoute reads: "/items/{id}", without the
	// method, never a router's own syntax ("/items/:id"), which no rule's
	// Routes would match.
	RouteTemplate string
	// RPCMethod is returned by FullMethod ("/pkg.Service/Method"; "" for
	// HTTP).
	RPCMethod string
	// Peer is returned by RemoteAddr ("203.0.113.7:54321").
	Peer string
	// Header holds the header lines or metadata, by name, each name's
	// values in the order received. Names are matched case-insensitively
	// (see Values).
	Header map[string][]string
}

// Context returns s.Ctx, or context.Background() when it is nil.
func (s Static) Context() context.Context {
	if s.Ctx == nil {
		return context.Background()
	}
	return s.Ctx
}

// Method returns s.HTTPMethod.
func (s Static) Method() string { return s.HTTPMethod }

// Route returns s.RouteTemplate.
func (s Static) Route() string { return s.RouteTemplate }

// FullMethod returns s.RPCMethod.
func (s Static) FullMethod() string { return s.RPCMethod }

// RemoteAddr returns s.Peer.
func (s Static) RemoteAddr() string { return s.Peer }

// Values returns s.Header[name] when that key is present, and otherwise
// the values of the keys of s.Header equal to name under case folding,
// merged in the sorted order of the keys when several differ only in case.
// It allocates only in that last case.
func (s Static) Values(name string) []string {
	if v, ok := s.Header[name]; ok {
		return v
	}
	var match string
	n := 0
	for k := range s.Header {
		if strings.EqualFold(k, name) {
			match = k
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case 1:
		return s.Header[match]
	}
	keys := make([]string, 0, n)
	for k := range s.Header {
		if strings.EqualFold(k, name) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, s.Header[k]...)
	}
	return out
}
