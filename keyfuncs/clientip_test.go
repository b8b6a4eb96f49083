package keyfuncs

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// proxies are the trusted proxies of most cases: an IPv4 private network,
// one IPv6 block, and a single address.
var proxies = WithTrustedProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1")

func TestClientIP(t *testing.T) {
	xff := func(lines ...string) map[string][]string { return map[string][]string{"X-Forwarded-For": lines} }
	fwd := func(lines ...string) map[string][]string { return map[string][]string{"Forwarded": lines} }
	forwarded := WithProxyHeader("Forwarded")
	realIP := WithProxyHeader("X-Real-IP")
	tests := []struct {
		name   string
		opts   []ClientIPOption
		peer   string
		header map[string][]string
		want   string // "" when an error wrapping ErrNoAddress is wanted
	}{
		// No proxy trusted: the key is the peer, whatever the headers say.
		{"no trust: the peer", nil, "203.0.113.7:54321", nil, "203.0.113.7"},
		{"no trust: spoofed X-Forwarded-For ignored", nil, "203.0.113.7:54321", xff("1.2.3.4"), "203.0.113.7"},
		{"no trust: spoofed Forwarded ignored", []ClientIPOption{forwarded}, "203.0.113.7:1", fwd("for=1.2.3.4"), "203.0.113.7"},
		{"no trust: spoofed X-Real-IP ignored", []ClientIPOption{realIP}, "203.0.113.7:1", map[string][]string{"X-Real-Ip": {"1.2.3.4"}}, "203.0.113.7"},
		{"no trust: peer without port", nil, "203.0.113.7", nil, "203.0.113.7"},
		{"no trust: IPv6 peer", nil, "[2001:DB8:0::0001]:443", nil, "2001:db8::1"},
		{"no trust: IPv6 peer without port", nil, "2001:db8::1", nil, "2001:db8::1"},
		{"no trust: IPv6 peer with zone", nil, "[fe80::1%eth0]:443", nil, "fe80::1"},
		{"no trust: IPv4-mapped peer", nil, "[::ffff:203.0.113.7]:443", nil, "203.0.113.7"},

		// X-Forwarded-For through trusted proxies.
		{"untrusted peer: header ignored", []ClientIPOption{proxies}, "203.0.113.7:1", xff("198.51.100.9"), "203.0.113.7"},
		{"trusted peer names the client", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9"), "198.51.100.9"},
		{"attacker-supplied leftmost ignored", []ClientIPOption{proxies}, "10.0.0.1:1", xff("1.2.3.4, 198.51.100.9"), "198.51.100.9"},
		{"attacker-supplied trusted address ignored", []ClientIPOption{proxies}, "10.0.0.1:1", xff("10.9.9.9, 198.51.100.9"), "198.51.100.9"},
		{"trusted proxy chain", []ClientIPOption{proxies}, "10.0.0.1:1", xff("1.2.3.4, 198.51.100.9, 10.0.0.3, 192.0.2.1"), "198.51.100.9"},
		{"every hop trusted: the leftmost", []ClientIPOption{proxies}, "10.0.0.1:1", xff("10.0.0.5, 10.0.0.3"), "10.0.0.5"},
		{"trusted peer, no header: the peer", []ClientIPOption{proxies}, "10.0.0.1:1", nil, "10.0.0.1"},
		{"trusted peer, empty header: the peer", []ClientIPOption{proxies}, "10.0.0.1:1", xff(""), "10.0.0.1"},
		{"multiple lines merged in order", []ClientIPOption{proxies}, "10.0.0.1:1", xff("1.2.3.4, 198.51.100.9", "10.0.0.2"), "198.51.100.9"},
		{"client's own line before the proxy's", []ClientIPOption{proxies}, "10.0.0.1:1", xff("1.2.3.4", "198.51.100.9"), "198.51.100.9"},
		{"walk crosses lines", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9", "10.0.0.2, 10.0.0.3"), "198.51.100.9"},
		{"empty lines and elements skipped", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9,, 10.0.0.2 ,", "", " "), "198.51.100.9"},
		{"header name case-insensitive", []ClientIPOption{proxies}, "10.0.0.1:1", map[string][]string{"x-forwarded-for": {"198.51.100.9"}}, "198.51.100.9"},
		{"hop with port", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9:4711"), "198.51.100.9"},
		{"IPv6 hop with port", []ClientIPOption{proxies}, "10.0.0.1:1", xff("[2001:db8::1]:4711"), "2001:db8::1"},
		{"IPv6 hop in brackets", []ClientIPOption{proxies}, "10.0.0.1:1", xff("[2001:db8::1]"), "2001:db8::1"},
		{"IPv6 hop with zone", []ClientIPOption{proxies}, "10.0.0.1:1", xff("fe80::1%eth0"), "fe80::1"},
		{"IPv6 trusted peer", []ClientIPOption{proxies}, "[2001:db8:ffff::1]:443", xff("198.51.100.9"), "198.51.100.9"},
		{"IPv6 trusted hop", []ClientIPOption{proxies}, "10.0.0.1:1", xff("2001:db8:1::5, 2001:db8:ffff::2"), "2001:db8:1::5"},
		{"IPv4-mapped trusted peer", []ClientIPOption{proxies}, "[::ffff:10.0.0.1]:443", xff("198.51.100.9"), "198.51.100.9"},
		{"IPv4-mapped trusted hop", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9, ::ffff:10.0.0.2"), "198.51.100.9"},
		{"IPv4-mapped client keyed as IPv4", []ClientIPOption{proxies}, "10.0.0.1:1", xff("::ffff:198.51.100.9"), "198.51.100.9"},
		{"garbage hop stops the walk", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9, garbage, 10.0.0.2"), "10.0.0.2"},
		{"garbage rightmost: the peer", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9, garbage"), "10.0.0.1"},
		{"unknown stops the walk", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9, unknown"), "10.0.0.1"},
		{"garbage left of the client ignored", []ClientIPOption{proxies}, "10.0.0.1:1", xff("<script>, 198.51.100.9"), "198.51.100.9"},
		{"IPv4 in brackets is garbage", []ClientIPOption{proxies}, "10.0.0.1:1", xff("[198.51.100.9]"), "10.0.0.1"},
		{"IPv6 port without brackets is garbage", []ClientIPOption{proxies}, "10.0.0.1:1", xff("1:2:3:4:5:6:7:8:80"), "10.0.0.1"},
		{"port out of range is garbage", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.51.100.9:65536"), "10.0.0.1"},
		{"leading zeros are garbage", []ClientIPOption{proxies}, "10.0.0.1:1", xff("198.051.100.9"), "10.0.0.1"},
		{"host name is garbage", []ClientIPOption{proxies}, "10.0.0.1:1", xff("client.example"), "10.0.0.1"},
		{"X-Real-IP not read by default", []ClientIPOption{proxies}, "10.0.0.1:1", map[string][]string{"X-Real-Ip": {"198.51.100.9"}}, "10.0.0.1"},
		{"trusting everyone trusts the leftmost", []ClientIPOption{WithTrustedProxies("0.0.0.0/0", "::/0")}, "203.0.113.7:1", xff("1.2.3.4, 198.51.100.9"), "1.2.3.4"},
		{"IPv4-mapped trusted prefix", []ClientIPOption{WithTrustedProxies("::ffff:10.0.0.0/104")}, "10.1.2.3:1", xff("198.51.100.9"), "198.51.100.9"},
		{"single trusted address", []ClientIPOption{WithTrustedProxies("10.0.0.1")}, "10.0.0.2:1", xff("198.51.100.9"), "10.0.0.2"},
		{"options accumulate", []ClientIPOption{WithTrustedProxies("10.0.0.1"), WithTrustedProxies("10.0.0.2")}, "10.0.0.2:1", xff("198.51.100.9, 10.0.0.1"), "198.51.100.9"},

		// A peer that is not an IP address.
		{"non-IP peer: error", []ClientIPOption{proxies}, "@", xff("198.51.100.9"), ""},
		{"empty peer: error", nil, "", nil, ""},
		{"trusted non-IP peer names the client", []ClientIPOption{proxies, WithTrustNonIPPeer()}, "@", xff("198.51.100.9, 10.0.0.2"), "198.51.100.9"},
		{"trusted non-IP peer without header: error", []ClientIPOption{proxies, WithTrustNonIPPeer()}, "", nil, ""},
		{"trusted non-IP peer with garbage: error", []ClientIPOption{proxies, WithTrustNonIPPeer()}, "", xff("garbage"), ""},
		{"trusted non-IP peer, all trusted: the leftmost", []ClientIPOption{proxies, WithTrustNonIPPeer()}, "bufconn", xff("10.0.0.4, 10.0.0.2"), "10.0.0.4"},

		// RFC 7239 Forwarded.
		{"Forwarded: token", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd("for=198.51.100.9"), "198.51.100.9"},
		{"Forwarded: quoted with port", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="198.51.100.9:4711"`), "198.51.100.9"},
		{"Forwarded: IPv6 in brackets with port", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="[2001:db8::1]:4711"`), "2001:db8::1"},
		{"Forwarded: IPv6 in brackets", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="[2001:db8::1]"`), "2001:db8::1"},
		{"Forwarded: unquoted brackets tolerated", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=[2001:db8::1]:80`), "2001:db8::1"},
		{"Forwarded: obfuscated port", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="198.51.100.9:_p1"`), "198.51.100.9"},
		{"Forwarded: other parameters, any case", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`proto=https;For=198.51.100.9; by="_proxy";host="a;b,c"`), "198.51.100.9"},
		{"Forwarded: attacker-supplied leftmost ignored", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=1.2.3.4, for=198.51.100.9`), "198.51.100.9"},
		{"Forwarded: trusted chain", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=198.51.100.9;proto=https, for="[2001:db8:ffff::5]";by=10.0.0.1`, "for=10.0.0.3"), "198.51.100.9"},
		{"Forwarded: every hop trusted", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=10.0.0.7, for=10.0.0.3`), "10.0.0.7"},
		{"Forwarded: obfuscated identifier stops the walk", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=198.51.100.9, for=_hidden, for=10.0.0.3`), "10.0.0.3"},
		{"Forwarded: unknown stops the walk", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=198.51.100.9, for=unknown`), "10.0.0.1"},
		{"Forwarded: element without for stops the walk", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=198.51.100.9, proto=https`), "10.0.0.1"},
		{"Forwarded: duplicate for stops the walk", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=198.51.100.9;for=1.2.3.4`), "10.0.0.1"},
		{"Forwarded: escape in the node stops the walk", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="198.51.100.\9"`), "10.0.0.1"},
		{"Forwarded: unterminated quote stops the walk", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="198.51.100.9`), "10.0.0.1"},
		{"Forwarded: client's broken quote cannot swallow the proxy's element", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="1.2.3.4, for=198.51.100.9`), "198.51.100.9"},
		{"Forwarded: client's quoted comma cannot split the proxy's element", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=1.2.3.4;x=", for=198.51.100.9`), "198.51.100.9"},
		{"Forwarded: escaped quote inside a quoted string", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=198.51.100.9;x="a\", for=1.2.3.4", for=10.0.0.3`), "198.51.100.9"},
		{"Forwarded: garbage element", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for=198.51.100.9, garbage`), "10.0.0.1"},
		{"Forwarded: IPv4-mapped", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="[::ffff:198.51.100.9]:80"`), "198.51.100.9"},
		{"Forwarded: IPv4 in brackets is garbage", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", fwd(`for="[198.51.100.9]"`), "10.0.0.1"},
		{"Forwarded: X-Forwarded-For not read", []ClientIPOption{proxies, forwarded}, "10.0.0.1:1", xff("198.51.100.9"), "10.0.0.1"},
		{"X-Forwarded-For: Forwarded not read", []ClientIPOption{proxies}, "10.0.0.1:1", fwd("for=198.51.100.9"), "10.0.0.1"},

		// X-Real-IP, opted in.
		{"X-Real-IP from a trusted peer", []ClientIPOption{proxies, realIP}, "10.0.0.1:1", map[string][]string{"X-Real-Ip": {"198.51.100.9"}}, "198.51.100.9"},
		{"X-Real-IP from an untrusted peer ignored", []ClientIPOption{proxies, realIP}, "203.0.113.7:1", map[string][]string{"X-Real-Ip": {"198.51.100.9"}}, "203.0.113.7"},
		{"X-Real-IP garbage: the peer", []ClientIPOption{proxies, realIP}, "10.0.0.1:1", map[string][]string{"X-Real-Ip": {"nonsense"}}, "10.0.0.1"},
		{"X-Real-IP: X-Forwarded-For not read", []ClientIPOption{proxies, realIP}, "10.0.0.1:1", xff("198.51.100.9"), "10.0.0.1"},

		// Prefix grouping.
		{"IPv6 /64", []ClientIPOption{WithIPv6Prefix(64)}, "[2001:db8:1:2:3:4:5:6]:1", nil, "2001:db8:1:2::/64"},
		{"IPv6 /56", []ClientIPOption{WithIPv6Prefix(56)}, "[2001:db8:1:2ff:3:4:5:6]:1", nil, "2001:db8:1:200::/56"},
		{"IPv6 /128", []ClientIPOption{WithIPv6Prefix(128)}, "[2001:db8::1]:1", nil, "2001:db8::1/128"},
		{"IPv6 /64 leaves IPv4 whole", []ClientIPOption{WithIPv6Prefix(64)}, "198.51.100.9:1", nil, "198.51.100.9"},
		{"IPv6 /64 of an IPv4-mapped client: IPv4", []ClientIPOption{WithIPv6Prefix(64)}, "[::ffff:198.51.100.9]:1", nil, "198.51.100.9"},
		{"IPv4 /24", []ClientIPOption{WithIPv4Prefix(24)}, "198.51.100.9:1", nil, "198.51.100.0/24"},
		{"IPv4 /24 leaves IPv6 whole", []ClientIPOption{WithIPv4Prefix(24)}, "[2001:db8::1]:1", nil, "2001:db8::1"},
		{"IPv6 /64 of the client behind a proxy", []ClientIPOption{proxies, WithIPv6Prefix(64)}, "10.0.0.1:1", xff("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::/64"},
		{"IPv6 /64 of a trusted proxy's word, not the proxy", []ClientIPOption{proxies, WithIPv6Prefix(48)}, "[2001:db8:ffff::1]:1", xff("2001:db8:ffff:1::1, 2001:db8:ffff::2"), "2001:db8:ffff::/48"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := ClientIP(tt.opts...)
			if err != nil {
				t.Fatalf("ClientIP() error = %v", err)
			}
			// The same peer as RemoteAddr's text and, when it parses as
			// one, as the address a PeerAddrRequest gives.
			static := Static{Peer: tt.peer, Header: tt.header}
			ap, perr := netip.ParseAddrPort(tt.peer)
			for _, r := range []Request{static, peerAddr{static, ap, perr == nil}} {
				got, err := fn(r)
				if tt.want == "" {
					if !errors.Is(err, ErrNoAddress) {
						t.Fatalf("ClientIP()(%T, peer %q, %v) = %q, %v; want an error wrapping ErrNoAddress", r, tt.peer, tt.header, got, err)
					}
					continue
				}
				if err != nil || got != tt.want {
					t.Fatalf("ClientIP()(%T, peer %q, %v) = %q, %v; want %q", r, tt.peer, tt.header, got, err, tt.want)
				}
			}
		})
	}
}

// peerAddr is a Static that gives its peer as an address too, as fiber's
// requests do.
type peerAddr struct {
	Static
	ap netip.AddrPort
	ok bool
}

func (p peerAddr) PeerAddr() (netip.AddrPort, bool) { return p.ap, p.ok }

func TestClientIPOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opts []ClientIPOption
		want string // in the message
	}{
		{"prefix too long", []ClientIPOption{WithTrustedProxies("10.0.0.0/33")}, "WithTrustedProxies"},
		{"not an address", []ClientIPOption{WithTrustedProxies("proxy.internal")}, `"proxy.internal"`},
		{"empty", []ClientIPOption{WithTrustedProxies("")}, "WithTrustedProxies"},
		{"zone", []ClientIPOption{WithTrustedProxies("fe80::1%eth0")}, "WithTrustedProxies"},
		{"second bad one named", []ClientIPOption{WithTrustedProxies("10.0.0.0/8", "10.0.0.0/8x")}, `"10.0.0.0/8x"`},
		{"IPv6 prefix 0", []ClientIPOption{WithIPv6Prefix(0)}, "WithIPv6Prefix"},
		{"IPv6 prefix 129", []ClientIPOption{WithIPv6Prefix(129)}, "WithIPv6Prefix"},
		{"IPv4 prefix 0", []ClientIPOption{WithIPv4Prefix(0)}, "WithIPv4Prefix"},
		{"IPv4 prefix 33", []ClientIPOption{WithIPv4Prefix(33)}, "WithIPv4Prefix"},
		{"empty header", []ClientIPOption{WithProxyHeader("")}, "WithProxyHeader"},
		{"header with a space", []ClientIPOption{WithProxyHeader("X Forwarded For")}, "WithProxyHeader"},
		{"nil option", []ClientIPOption{nil}, "option 0 is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := ClientIP(tt.opts...)
			if !errors.Is(err, ErrInvalidOption) || fn != nil {
				t.Fatalf("ClientIP() = %v, %v; want an error wrapping ErrInvalidOption", fn != nil, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "ratelimit: invalid option: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("ClientIP() error = %q, want it to start with \"ratelimit: invalid option: \" and contain %q", msg, tt.want)
			}
		})
	}
}

// TestClientIPLookupNames checks the names a ClientIP Func asks for: the
// canonical header name, so that net/http's Header.Values finds it without
// allocating.
func TestClientIPLookupNames(t *testing.T) {
	for _, tt := range []struct{ header, want string }{
		{"", "X-Forwarded-For"},
		{"forwarded", "Forwarded"},
		{"x-real-ip", "X-Real-Ip"},
		{"CF-Connecting-IP", "Cf-Connecting-Ip"},
	} {
		opts := []ClientIPOption{WithTrustedProxies("10.0.0.0/8")}
		if tt.header != "" {
			opts = append(opts, WithProxyHeader(tt.header))
		}
		fn, err := ClientIP(opts...)
		if err != nil {
			t.Fatal(err)
		}
		r := &recorder{Static: Static{Peer: "10.0.0.1:1"}}
		if _, err := fn(r); err != nil {
			t.Fatal(err)
		}
		if len(r.names) != 1 || r.names[0] != tt.want {
			t.Errorf("WithProxyHeader(%q): Values called with %q, want [%q]", tt.header, r.names, tt.want)
		}
	}
}

// recorder is a Request that records the names passed to Values.
type recorder struct {
	Static
	names []string
}

func (r *recorder) Values(name string) []string {
	r.names = append(r.names, name)
	return r.Static.Values(name)
}

func TestParseTrusted(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"10.0.0.1", "10.0.0.1/32"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
	} {
		p, ok := parseTrusted(tt.in)
		if !ok || p.String() != tt.want {
			t.Errorf("parseTrusted(%q) = %v, %v; want %s", tt.in, p, ok, tt.want)
		}
	}
}

// TestParseIPv4Peer: the IPv4 fast path accepts exactly the canonical
// IPv4 peers, with or without a decimal port, as net/netip reads them
// (refIPv4Peer), and leaves everything else to parseHost.
func TestParseIPv4Peer(t *testing.T) {
	tests := []struct {
		name string
		s    string
		want string // the host, "" when refused
	}{
		{"address and port", "192.0.2.1:1234", "192.0.2.1"},
		{"address alone", "192.0.2.1", "192.0.2.1"},
		{"zeros", "0.0.0.0:0", "0.0.0.0"},
		{"largest", "255.255.255.255:65535", "255.255.255.255"},
		{"port with leading zeros", "1.2.3.4:0080", "1.2.3.4"},
		{"very long port", "1.2.3.4:000000000080", "1.2.3.4"},
		{"port of zeros", "1.2.3.4:00000000000000000000000", "1.2.3.4"},
		{"two-digit octets", "10.20.30.40:1", "10.20.30.40"},
		{"three-digit octets", "100.200.250.199", "100.200.250.199"},

		{"empty", "", ""},
		{"colon", ":", ""},
		{"port alone", ":80", ""},
		{"port too large alone", ":65536", ""},
		{"port zero alone", ":0", ""},
		{"leading zero", "01.2.3.4", ""},
		{"leading zero, last octet", "1.2.3.04:1", ""},
		{"octet of two zeros", "1.2.3.00", ""},
		{"octet 256", "1.2.3.256", ""},
		{"octet 999", "999.2.3.4", ""},
		{"four digits", "1.2.3.1000", ""},
		{"three octets", "1.2.3", ""},
		{"three octets and port", "1.2.3:80", ""},
		{"trailing dot", "1.2.3.4.", ""},
		{"five octets", "1.2.3.4.5", ""},
		{"empty octet", "1..2.3", ""},
		{"leading dot", ".1.2.3.4", ""},
		{"empty port", "1.2.3.4:", ""},
		{"port 65536", "1.2.3.4:65536", ""},
		{"port overflowing 64 bits", "1.2.3.4:18446744073709551616", ""},
		{"signed port", "1.2.3.4:+1", ""},
		{"negative port", "1.2.3.4:-1", ""},
		{"letter in port", "1.2.3.4:8x", ""},
		{"two ports", "1.2.3.4:1:2", ""},
		{"space before", " 1.2.3.4", ""},
		{"space after", "1.2.3.4 ", ""},
		{"zone", "1.2.3.4%eth0:1", ""},
		{"bracketed IPv4", "[1.2.3.4]:80", ""},
		{"IPv6", "[2001:db8::1]:443", ""},
		{"IPv6 alone", "2001:db8::1", ""},
		{"IPv6 with zone", "[fe80::1%eth0]:443", ""},
		{"IPv4-mapped", "[::ffff:1.2.3.4]:1", ""},
		{"IPv4-mapped alone", "::ffff:1.2.3.4", ""},
		{"obfuscated port", "1.2.3.4:_p1", ""},
		{"non-ASCII digit", "1.2.3.\u0664", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, a, ok := parseIPv4Peer(tt.s)
			if host != tt.want || ok != (tt.want != "") {
				t.Fatalf("parseIPv4Peer(%q) = %q, %v, %v; want %q", tt.s, host, a, ok, tt.want)
			}
			if rh, ra, rok := refIPv4Peer(tt.s); host != rh || a != ra || ok != rok {
				t.Fatalf("parseIPv4Peer(%q) = %q, %v, %v; net/netip reads %q, %v, %v", tt.s, host, a, ok, rh, ra, rok)
			}
			if ok {
				if full, fullOK := parseHost(tt.s, false); !fullOK || full != a || a.String() != host {
					t.Fatalf("parseIPv4Peer(%q) = %v; parseHost = %v, %v", tt.s, a, full, fullOK)
				}
			}
		})
	}
}

// TestClientIPPeerAllocs: an untrusted IPv4 peer's key is a slice of the
// peer address, with no allocation; an IPv6 peer, or one keyed by its /24,
// costs one allocation, the key.
func TestClientIPPeerAllocs(t *testing.T) {
	plain, err := ClientIP(WithTrustedProxies("10.0.0.0/8"))
	if err != nil {
		t.Fatal(err)
	}
	grouped, err := ClientIP(WithIPv4Prefix(24))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		fn     Func
		peer   string
		want   string
		allocs float64
	}{
		{"IPv4 peer", plain, "192.0.2.1:1234", "192.0.2.1", 0},
		{"IPv4 peer without port", plain, "192.0.2.1", "192.0.2.1", 0},
		{"IPv4 peer keyed by /24", grouped, "192.0.2.1:1234", "192.0.2.0/24", 1},
		{"IPv6 peer", plain, "[2001:db8::1]:1234", "2001:db8::1", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Request = Static{Peer: tc.peer} // boxed once, outside the count
			if got, err := tc.fn(r); got != tc.want || err != nil {
				t.Fatalf("key = %q, %v; want %q", got, err, tc.want)
			}
			if got := testing.AllocsPerRun(100, func() { _, _ = tc.fn(r) }); got != tc.allocs {
				t.Errorf("%v allocations, want %v", got, tc.allocs)
			}
		})
	}
}

// TestClientIPPeerNames: through PeerAddrRequest, the key is the peer's
// text for many more peers than slots (each slot replaced many times, from
// several goroutines), and a peer seen just before costs no allocation.
func TestClientIPPeerNames(t *testing.T) {
	fn, err := ClientIP()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 20 * peerNameSlots {
				a := netip.AddrFrom4([4]byte{byte(g), byte(i >> 16), byte(i >> 8), byte(i)})
				got, err := fn(peerAddr{Static{Peer: "ignored"}, netip.AddrPortFrom(a, 80), true})
				if err != nil || got != a.String() {
					t.Errorf("peer %v: key %q, %v; want %q", a, got, err, a.String())
					return
				}
			}
		})
	}
	wg.Wait()
	// A pointer, which the Request interface holds without an allocation.
	r := &peerAddr{Static{Peer: "ignored"}, netip.MustParseAddrPort("[::ffff:198.51.100.9]:80"), true}
	if n := testing.AllocsPerRun(100, func() {
		if got, _ := fn(r); got != "198.51.100.9" {
			t.Fatalf("key %q, want 198.51.100.9", got)
		}
	}); n != 0 {
		t.Errorf("a peer seen before: %v allocations, want 0", n)
	}
}
