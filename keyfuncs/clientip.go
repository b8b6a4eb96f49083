package keyfuncs

import (
	"fmt"
	"net/netip"
	"net/textproto"
	"strings"
	"sync/atomic"
	"unsafe"
)

// ClientIPOption configures ClientIP. Options are applied in order; for
// options that set one value, the last one wins.
type ClientIPOption interface {
	applyClientIP(*ipConfig)
}

type clientIPOptionFunc func(*ipConfig)

func (f clientIPOptionFunc) applyClientIP(c *ipConfig) { f(c) }

type ipConfig struct {
	trusted    []netip.Prefix // IPv4 prefixes for IPv4 and mapped addresses
	header     string         // canonical header name
	forwarded  bool           // header has RFC 7239 syntax
	trustNonIP bool
	v4bits     int // 0: the whole address
	v6bits     int
	err        error // the first invalid option

	peers *peerNames // the text of IPv4 peers read through PeerAddrRequest
}

// peerNameSlots is how many IPv4 peers' text a ClientIP keeps, 8 KiB of
// slots.
const (
	peerNameBits  = 10
	peerNameSlots = 1 << peerNameBits
)

// peerNames keeps the text of recently seen IPv4 peers, so that a
// framework that holds the peer as an address (PeerAddrRequest) does not
// cost a formatting and an allocation per request from a client seen
// before. A slot holds one address and its text, replaced whole; a miss
// formats the address into one allocation, as formatting alone would.
type peerNames [peerNameSlots]atomic.Pointer[peerName]

type peerName struct {
	u   uint32 // the address, big-endian
	n   uint8
	buf [15]byte // "255.255.255.255"
}

// name returns the text of a, an IPv4 address. An entry is found and
// compared by the address as one integer, which unlike the [4]byte of
// As4 stays in a register.
func (p *peerNames) name(a netip.Addr) string {
	b := a.As4()
	u := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	slot := &p[(u*0x9e3779b1)>>(32-peerNameBits)]
	if e := slot.Load(); e != nil && e.u == u {
		return unsafe.String(&e.buf[0], e.n)
	}
	return newPeerName(slot, u)
}

// newPeerName formats the address u into a new entry of slot, replacing
// the one there. It is apart from name, and takes u rather than the
// netip.Addr, so that a hit keeps nothing for a miss in registers or on
// the stack.
func newPeerName(slot *atomic.Pointer[peerName], u uint32) string {
	e := &peerName{u: u}
	a := netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)})
	e.n = uint8(len(a.AppendTo(e.buf[:0])))
	slot.Store(e)
	return unsafe.String(&e.buf[0], e.n) // e.buf is not written again
}

func (c *ipConfig) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithTrustedProxies adds the proxies whose word about the client is
// trusted, as CIDR prefixes ("10.0.0.0/8", "2001:db8::/32") or single
// addresses ("192.0.2.1"). List exactly the proxies you run (or your CDN's
// published ranges): any host inside these prefixes can name any client.
// Without this option no proxy is trusted and the key is the TCP peer.
// IPv4-mapped prefixes ("::ffff:10.0.0.0/104") are taken as the IPv4
// prefix they map; IPv4 addresses are matched by IPv4 prefixes only. A
// prefix with host bits set is masked ("10.1.2.3/8" is 10.0.0.0/8).
func WithTrustedProxies(cidrs ...string) ClientIPOption {
	return clientIPOptionFunc(func(c *ipConfig) {
		for _, s := range cidrs {
			p, ok := parseTrusted(s)
			if !ok {
				c.fail("WithTrustedProxies: %q is not an IP address or CIDR prefix", s)
				return
			}
			c.trusted = append(c.trusted, p)
		}
	})
}

func parseTrusted(s string) (netip.Prefix, bool) {
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, false
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	p = p.Masked()
	// Addresses are unmapped before any trust check, so a mapped prefix
	// must become the IPv4 prefix it denotes or it would match nothing.
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, true
}

// WithProxyHeader sets the header that trusted proxies use to name the hops
// before them. Exactly one header is read; headers are never mixed:
//
//   - "X-Forwarded-For" (the default): a comma-separated list of addresses,
//     each proxy appending the address it received the request from. Items
//     may carry a port ("192.0.2.1:4711", "[2001:db8::1]:4711").
//   - "Forwarded": RFC 7239 elements, the for= parameter of each (quoted
//     strings, IPv6 in brackets, ports; "unknown" and obfuscated
//     identifiers such as "_hidden" stop the walk).
//   - any other name ("X-Real-IP", "X-Original-Forwarded-For",
//     "CF-Connecting-IP") is read with X-Forwarded-For syntax. A
//     single-address header such as X-Real-IP is a chain of one hop: it is
//     read only when the TCP peer is trusted, as every hop is.
//
// The name is matched case-insensitively.
func WithProxyHeader(name string) ClientIPOption {
	return clientIPOptionFunc(func(c *ipConfig) {
		if !isToken(name) {
			c.fail("WithProxyHeader: %q is not a header name", name)
			return
		}
		c.header = textproto.CanonicalMIMEHeaderKey(name)
		c.forwarded = strings.EqualFold(name, "Forwarded")
	})
}

// WithIPv6Prefix keys IPv6 clients by the network of the given prefix
// length in bits, 1 to 128, instead of the whole address: the smallest
// block assigned to one subscriber is normally a whole /64 (RFC 6177), whose
// 2^64 addresses it can rotate through at will, so 64 is the usual choice. The key
// is then the prefix in CIDR notation, "2001:db8:1:2::/64". Without this
// option an IPv6 client is keyed by its full address.
func WithIPv6Prefix(bits int) ClientIPOption {
	return clientIPOptionFunc(func(c *ipConfig) {
		if bits < 1 || bits > 128 {
			c.fail("WithIPv6Prefix: prefix length must be 1 to 128, got %d", bits)
			return
		}
		c.v6bits = bits
	})
}

// WithIPv4Prefix keys IPv4 clients by the network of the given prefix
// length in bits, 1 to 32, in CIDR notation ("198.51.100.0/24"). Without
// this option an IPv4 client is keyed by its full address, which is
// usually right: NAT already puts many users behind one IPv4 address.
func WithIPv4Prefix(bits int) ClientIPOption {
	return clientIPOptionFunc(func(c *ipConfig) {
		if bits < 1 || bits > 32 {
			c.fail("WithIPv4Prefix: prefix length must be 1 to 32, got %d", bits)
			return
		}
		c.v4bits = bits
	})
}

// WithTrustNonIPPeer trusts a TCP peer whose address is not an IP address,
// such as a reverse proxy connected over a Unix socket (RemoteAddr "@" or
// "") or an in-memory listener, so that its proxy header is read. Without
// it such a request has no client address and the Func returns an error
// wrapping ErrNoAddress.
func WithTrustNonIPPeer() ClientIPOption {
	return clientIPOptionFunc(func(c *ipConfig) { c.trustNonIP = true })
}

// ClientIP returns a Func whose key is the address of the client, found by
// walking the proxy header right to left from the TCP peer through the
// trusted proxies (see the package documentation for the trust decision):
//
//   - start at the TCP peer; while the current hop is a trusted proxy, move
//     to the hop it names, the next one to the left;
//   - the first untrusted hop is the client; if every hop is trusted, the
//     leftmost is;
//   - a hop that cannot be parsed (garbage, "unknown", an obfuscated
//     identifier) stops the walk, and the last good hop to its right is the
//     client.
//
// All field lines of the header are taken together, in order. Addresses
// are normalized before any trust check or output: ports and IPv6 zones are
// dropped and IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) become IPv4.
// The key is the canonical text of the address (netip.Addr.String), or of
// its network with WithIPv6Prefix or WithIPv4Prefix. With no options no
// proxy is trusted and the key is the TCP peer's address.
//
// The Func returns an error wrapping ErrNoAddress when there is no client
// address (see ErrNoAddress); it never returns ErrNotApplicable. ClientIP
// returns an error wrapping ErrInvalidOption, naming the option, when an
// option is invalid. The Func allocates once per call, for the key, except
// when the key is an untrusted IPv4 peer's address without WithIPv4Prefix,
// the common case, which it returns as a slice of Request.RemoteAddr:
// nothing to parse with netip, nothing to allocate; or, from a
// PeerAddrRequest, as text it keeps for the last peers it saw (1,024
// slots), formatted and allocated once per peer that is not there.
func ClientIP(opts ...ClientIPOption) (Func, error) {
	c := &ipConfig{header: "X-Forwarded-For", peers: new(peerNames)}
	for i, o := range opts {
		if o == nil {
			c.fail("ClientIP: option %d is nil", i)
			continue
		}
		o.applyClientIP(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	return c.key, nil
}

func (c *ipConfig) key(r Request) (string, error) {
	if c.v4bits != 0 {
		return c.walkKey(r, r.RemoteAddr())
	}
	if pr, ok := r.(PeerAddrRequest); ok {
		// The peer as an address, when the framework holds it as one:
		// an untrusted IPv4 peer is the client, and its key the
		// address's text, as below.
		if ap, ok := pr.PeerAddr(); ok {
			if a := ap.Addr().Unmap(); a.Is4() && !c.trusts(a) {
				return c.peers.name(a), nil
			}
		}
	}
	peer := r.RemoteAddr()
	if host, a, ok := parseIPv4Peer(peer); ok {
		// The peer is the client unless trusted, and its text is the
		// address as netip.Addr.String prints it (dotted decimal, no
		// leading zeros: nothing else parses), so the key is a slice of
		// it: digits and dots only, no allocation. Testing for trusted
		// proxies first spares the common case, none, the registers the
		// trust loop's calls would make key save.
		if len(c.trusted) == 0 || !c.trusts(a) {
			return host, nil
		}
	}
	return c.walkKey(r, peer)
}

// walkKey is the key when the peer is not an untrusted IPv4 client: the
// client found by the walk, as text. It is apart from key so that key's
// common case pays for none of its stack and registers.
func (c *ipConfig) walkKey(r Request, peer string) (string, error) {
	a, err := c.client(r, peer)
	if err != nil {
		return "", err
	}
	// Appending to a stack buffer makes the key the only allocation
	// (Prefix.String makes several).
	var buf [64]byte // an IPv6 prefix in text is at most 43 bytes
	b := buf[:0]
	switch {
	case a.Is4() && c.v4bits > 0:
		p, _ := a.Prefix(c.v4bits) // bits validated, cannot fail
		b = p.AppendTo(b)
	case a.Is6() && c.v6bits > 0:
		p, _ := a.Prefix(c.v6bits)
		b = p.AppendTo(b)
	default:
		b = a.AppendTo(b)
	}
	return string(b), nil
}

func (c *ipConfig) trusts(a netip.Addr) bool {
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// client walks the hops right to left. cur is the last good hop seen; it is
// the zero Addr only while the walk is still at a trusted non-IP peer.
func (c *ipConfig) client(r Request, peer string) (netip.Addr, error) {
	cur, ok := parseHost(peer, false)
	if ok {
		if !c.trusts(cur) {
			return cur, nil
		}
	} else if !c.trustNonIP {
		return netip.Addr{}, fmt.Errorf("%w: the peer address %q is not an IP address (see WithTrustNonIPPeer)", ErrNoAddress, peer)
	}
	lines := r.Values(c.header)
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for rest != "" {
			var elem string
			var a netip.Addr
			if c.forwarded {
				elem, rest, ok = lastForwardedElement(rest)
				if ok {
					if elem = trimOWS(elem); elem == "" {
						continue // empty list elements are ignored (RFC 9110, 5.6.1)
					}
					a, ok = forwardedFor(elem)
				}
			} else {
				elem, rest = lastListElement(rest)
				if elem = trimOWS(elem); elem == "" {
					continue
				}
				a, ok = parseHost(elem, false)
			}
			if !ok {
				return c.stop(cur, peer)
			}
			cur = a
			if !c.trusts(a) {
				return a, nil
			}
		}
	}
	return c.stop(cur, peer)
}

// stop ends the walk at the last good hop, which may still be missing when
// the peer is a trusted non-IP address.
func (c *ipConfig) stop(cur netip.Addr, peer string) (netip.Addr, error) {
	if !cur.IsValid() {
		return netip.Addr{}, fmt.Errorf("%w: the peer %q is not an IP address and its %s header names no client", ErrNoAddress, peer, c.header)
	}
	return cur, nil
}

// lastListElement splits an X-Forwarded-For line before its last element.
// Splitting from the right on the last comma is exact whatever the client
// put on the left: the elements trusted proxies appended are never merged
// with the client's text.
func lastListElement(line string) (elem, rest string) {
	i := strings.LastIndexByte(line, ',')
	if i < 0 {
		return line, ""
	}
	return line[i+1:], line[:i]
}

// lastForwardedElement splits a Forwarded line before its last element: the
// text after the last comma outside a quoted string. It scans from the
// right so that a malformed prefix written by the client (an unbalanced
// quote) cannot swallow the well-formed elements that trusted proxies
// appended after it. ok is false when a quoted string has no opening quote:
// the rest of the line is then garbage, and the walk stops there.
func lastForwardedElement(line string) (elem, rest string, ok bool) {
	for i := len(line) - 1; i >= 0; i-- {
		switch line[i] {
		case ',':
			return line[i+1:], line[:i], true
		case '"':
			// The closing quote of a quoted string: find its opening
			// quote, the nearest one to the left not escaped by an odd
			// number of backslashes (RFC 9110, 5.6.4).
			j := i - 1
			for ; j >= 0; j-- {
				if line[j] == '"' && backslashesBefore(line, j)%2 == 0 {
					break
				}
			}
			if j < 0 {
				return line, "", false
			}
			i = j
		}
	}
	return line, "", true
}

func backslashesBefore(s string, j int) int {
	n := 0
	for j--; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n
}

// forwardedFor returns the address in the for= parameter of one Forwarded
// element (RFC 7239, section 4): pairs token=value separated by ";", each
// value a token or a quoted string, parameter names case-insensitive. It
// is lenient about whitespace around "=" and ";" and about unquoted values
// holding ":" or brackets, which some proxies send, and strict about the
// rest: an element with no for=, two of them, or a syntax error is not a
// usable hop.
func forwardedFor(elem string) (netip.Addr, bool) {
	var node string
	found := false
	i := 0
	for {
		i = skipOWS(elem, i)
		if i == len(elem) {
			break
		}
		if elem[i] == ';' {
			i++
			continue
		}
		start := i
		for i < len(elem) && isTokenChar(elem[i]) {
			i++
		}
		name := elem[start:i]
		if name == "" {
			return netip.Addr{}, false
		}
		if i = skipOWS(elem, i); i == len(elem) || elem[i] != '=' {
			return netip.Addr{}, false
		}
		i = skipOWS(elem, i+1)
		var value string
		escaped := false
		if i < len(elem) && elem[i] == '"' {
			j := i + 1
			for ; j < len(elem) && elem[j] != '"'; j++ {
				if elem[j] == '\\' {
					escaped = true
					j++
				}
			}
			if j >= len(elem) {
				return netip.Addr{}, false
			}
			value, i = elem[i+1:j], j+1
		} else {
			start := i
			for i < len(elem) && isBareValueChar(elem[i]) {
				i++
			}
			value = elem[start:i]
		}
		if i = skipOWS(elem, i); i < len(elem) && elem[i] != ';' {
			return netip.Addr{}, false
		}
		if strings.EqualFold(name, "for") {
			// A parameter occurs at most once per element (RFC 7239,
			// section 4); no node needs escaping, so an escape is garbage.
			if found || escaped {
				return netip.Addr{}, false
			}
			found, node = true, value
		}
	}
	// "unknown" and obfuscated identifiers ("_hidden", RFC 7239, section
	// 6.3) hide the hop, and parseHost rejects them.
	if !found {
		return netip.Addr{}, false
	}
	return parseHost(node, true)
}

// parseHost parses an address with an optional port: "192.0.2.1",
// "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:80",
// with IPv6 zones. With obfPort, the port may be an obfuscated identifier
// ("_p1", RFC 7239, section 6.3). It returns the address normalized: zone
// dropped and IPv4-mapped addresses unmapped, so that a mapped address is
// checked against IPv4 prefixes and keyed as IPv4.
func parseHost(s string, obfPort bool) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	bracketed := s[0] == '['
	// Only an unbracketed text with no colon (IPv4) or two or more (IPv6)
	// can be a bare address. Deciding first spares the failed
	// netip.ParseAddr of "ip:port", whose error allocates.
	if !bracketed && strings.Count(s, ":") != 1 {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, false
		}
		return normalize(a), true
	}
	host, port := s, ""
	if !bracketed || s[len(s)-1] != ']' {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return netip.Addr{}, false
		}
		host, port = s[:i], s[i+1:]
		if !validPort(port, obfPort) {
			return netip.Addr{}, false
		}
	}
	if bracketed {
		if len(host) < 2 || host[len(host)-1] != ']' {
			return netip.Addr{}, false
		}
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || !a.Is6() {
			return netip.Addr{}, false // brackets hold IPv6 only
		}
		return normalize(a), true
	}
	a, err := netip.ParseAddr(host)
	if err != nil || !a.Is4() {
		return netip.Addr{}, false // IPv6 with a port needs brackets
	}
	return a, true
}

// parseIPv4Peer parses the common TCP peer, an IPv4 address in dotted
// decimal with an optional port ("192.0.2.1:4711"), strictly: four decimal
// octets of at most three digits, 0 to 255, without leading zeros, and a
// port validPort accepts. It returns the address's text, a prefix of s, and
// the address; ok is false for anything else (IPv6, a zone, garbage), which
// parseHost then decides. Whatever it accepts, parseHost accepts as the
// same address, whose String is host.
func parseIPv4Peer(s string) (host string, a netip.Addr, ok bool) {
	// The index is unsigned so that each i < n test also proves s[i] in
	// range, with no second bounds check, and digits are read as uint,
	// whose wraparound below '0' makes "d > 9" refuse every non-digit.
	n := uint(len(s))
	i := uint(0)
	var ip uint32 // the octets read so far, big-endian
	for k := 0; ; k++ {
		// One to three digits, the first not 0 unless alone. An octet
		// has at most three, so they are read unrolled, each test made
		// once; a digit after the third one is left to the separator
		// test below, which refuses it.
		if i >= n {
			return "", netip.Addr{}, false
		}
		v := uint(s[i]) - '0'
		if v > 9 {
			return "", netip.Addr{}, false
		}
		i++
		if i < n {
			if d := uint(s[i]) - '0'; d <= 9 {
				if v == 0 {
					return "", netip.Addr{}, false
				}
				v = v*10 + d
				i++
				if i < n {
					if d := uint(s[i]) - '0'; d <= 9 {
						if v = v*10 + d; v > 255 {
							return "", netip.Addr{}, false
						}
						i++
					}
				}
			}
		}
		ip = ip<<8 | uint32(v)
		if k == 3 {
			break
		}
		if i >= n || s[i] != '.' {
			return "", netip.Addr{}, false
		}
		i++
	}
	host = s[:i]
	// What follows is nothing or a decimal port, 0 to 65535, leading
	// zeros allowed as validPort allows them; read here, it costs no call
	// and no reslice.
	if i < n {
		if s[i] != ':' || i+1 == n {
			return "", netip.Addr{}, false
		}
		p := uint(0)
		for i++; i < n; i++ {
			d := uint(s[i]) - '0'
			if d > 9 {
				return "", netip.Addr{}, false
			}
			if p = p*10 + d; p > 65535 {
				return "", netip.Addr{}, false
			}
		}
	}
	return host, netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

func normalize(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

// validPort reports whether p is a decimal port 0 to 65535 (leading zeros
// allowed, as strconv.ParseUint allows them) or, with obf, an obfuscated
// port: "_" 1*(ALPHA / DIGIT / "." / "_" / "-").
func validPort(p string, obf bool) bool {
	if p == "" {
		return false
	}
	if obf && p[0] == '_' {
		if len(p) == 1 {
			return false
		}
		for i := 1; i < len(p); i++ {
			c := p[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
				return false
			}
		}
		return true
	}
	n := 0
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return false
		}
		if n = n*10 + int(c-'0'); n > 65535 {
			return false
		}
	}
	return true
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

func skipOWS(s string, i int) int {
	for i < len(s) && isOWS(s[i]) {
		i++
	}
	return i
}

func trimOWS(s string) string {
	for s != "" && isOWS(s[0]) {
		s = s[1:]
	}
	for s != "" && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// isTokenChar reports whether c is a tchar (RFC 9110, 5.6.2).
func isTokenChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// isBareValueChar reports whether c may appear in an unquoted Forwarded
// value: a visible character other than the delimiters '"', ',' and ';'.
// This admits "[2001:db8::1]:80", which RFC 7239 wants quoted.
func isBareValueChar(c byte) bool {
	return c > ' ' && c != 0x7f && c != '"' && c != ',' && c != ';'
}
