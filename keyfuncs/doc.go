// Package keyfuncs derives the identities of a request (client address,
// user, credential, route, gRPC method, any custom dimension) that rate
// limit tiers are keyed by. Key functions are written once against Request,
// a small framework-neutral view of a request, and every framework adapter
// (net/http, gin, fiber, gRPC) implements Request over its native request.
//
// A Func returns a key, or ErrNotApplicable when its tier does not apply to
// the request (an anonymous request has no user; a request without an API
// key skips the per-key tier), or another error when it cannot decide. Build
// Funcs once, at startup: constructors that take configuration validate it
// and return an error wrapping ErrInvalidOption that names what is wrong.
// Every Func is safe for concurrent use.
//
//	ip, err := keyfuncs.ClientIP(keyfuncs.WithTrustedProxies("10.0.0.0/8"), keyfuncs.WithIPv6Prefix(64))
//	user, err := keyfuncs.FromContext(userKey)
//	perUserRoute, err := keyfuncs.Compose(user, keyfuncs.MethodAndRoute())
//
// # Which address is the client
//
// A request reaches the server from its TCP peer. Behind reverse proxies
// and load balancers the peer is the nearest proxy, and the client's
// address is in a header that each proxy appends to: X-Forwarded-For, a
// comma-separated list of addresses, or Forwarded (RFC 7239), a list of
// elements whose for= parameter names the hop. Read left to right, the list
// is the path of the request: the client, then each proxy it passed. But a
// proxy only appends; it does not clear what the client sent. A client can
// therefore put any text at the left of the list ("X-Forwarded-For: 1.2.3.4")
// and the proxies will faithfully keep it. Taking the leftmost entry, as
// many libraries do, lets every client choose its own key and walk past
// any per-IP limit.
//
// The only entries worth believing are the ones written by proxies you run,
// and those are at the right end. So ClientIP walks the chain right to left,
// starting at the TCP peer (which no client can forge): while the current
// hop is a trusted proxy, what that proxy appended, the hop to its left, is
// believed, and the walk moves there. The first hop that is not a trusted
// proxy is where trust ends: it connected to a trusted proxy, so that proxy
// saw its address and recorded it truthfully, but nothing it says about the
// hops before it can be believed. That hop, the rightmost untrusted one, is
// the client. It may be a forward proxy or a NAT in front of the real user,
// but it is the first address the client does not control, which is what a
// rate limit needs. If every hop is trusted (a request from inside your
// network), the leftmost is the client. RFC 7239, section 8.1, describes
// the same concern: the header can be forged by anyone before the first
// trusted proxy.
//
// Which proxies are trusted is configuration (WithTrustedProxies): by
// default none, so the key is the TCP peer and headers are ignored. The
// header is chosen by WithProxyHeader, X-Forwarded-For by default, and only
// that one is read: mixing headers would let a client add an entry to the
// one your proxies do not write. For the same reason X-Real-IP, which a
// proxy sets rather than appends to, is read only when chosen and, like
// every hop, only when the peer is a trusted proxy. A hop that cannot be
// parsed, or that a proxy has hidden ("unknown", an obfuscated identifier
// such as "_hidden", RFC 7239 section 6), stops the walk, and the last good
// hop to its right, a trusted proxy, is the client: keying on the proxy is
// coarse, but never something a client chose.
//
// Addresses are normalized before they are compared or returned: ports and
// IPv6 zones are dropped, and IPv4-mapped IPv6 addresses (::ffff:192.0.2.1)
// become IPv4, so one client has one key and a mapped address cannot dodge
// an IPv4 trust rule. An IPv6 client can be keyed by its /64 (WithIPv6Prefix),
// the block one subscriber usually gets whole.
//
// # Implementing Request
//
// An adapter implements Request over its native request without copying
// it: net/http's Header.Values, gRPC's metadata.MD and the peer address are
// enough. Values must return every field line of a header, in order:
// ClientIP depends on seeing the whole chain. Route must be the router's
// template, never the raw path, so that a client cannot create buckets at
// will. An adapter whose framework holds the peer as an address, not text,
// also implements PeerAddrRequest, so that ClientIP need not parse text
// formatted for it. Static is a plain implementation for tests and simple
// uses.
package keyfuncs
