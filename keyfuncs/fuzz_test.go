package keyfuncs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The fuzz targets check the parsers against invariants and against a
// reference written differently: the reference splits whole lines left to
// right with strings.Split and net/netip's ParseAddrPort, where the
// implementation scans from the right without allocating.

// fuzzConfig is the configuration a fuzz mode byte selects.
type fuzzConfig struct {
	forwarded  bool           // bit 0: Forwarded, else X-Forwarded-For
	trusted    []netip.Prefix // bits 1-2: none, a few proxies, everything
	group      bool           // bit 3: IPv6 /64 and IPv4 /24
	trustNonIP bool           // bit 4
}

var fuzzProxies = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("127.0.0.1/32"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("2001:db8::/32"),
}

func fuzzConfigOf(mode byte) fuzzConfig {
	c := fuzzConfig{forwarded: mode&1 != 0, group: mode&8 != 0, trustNonIP: mode&16 != 0}
	switch mode >> 1 & 3 {
	case 1, 3:
		c.trusted = fuzzProxies
	case 2:
		c.trusted = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}
	}
	return c
}

func (c fuzzConfig) options() []ClientIPOption {
	var opts []ClientIPOption
	if c.forwarded {
		opts = append(opts, WithProxyHeader("forwarded"))
	}
	for _, p := range c.trusted {
		opts = append(opts, WithTrustedProxies(p.String()))
	}
	if c.group {
		opts = append(opts, WithIPv6Prefix(64), WithIPv4Prefix(24))
	}
	if c.trustNonIP {
		opts = append(opts, WithTrustNonIPPeer())
	}
	return opts
}

func (c fuzzConfig) trusts(a netip.Addr) bool {
	return slices.ContainsFunc(c.trusted, func(p netip.Prefix) bool { return p.Contains(a) })
}

func (c fuzzConfig) key(a netip.Addr) string {
	if c.group {
		bits := 64
		if a.Is4() {
			bits = 24
		}
		p, err := a.Prefix(bits)
		if err != nil {
			panic(err)
		}
		return p.String()
	}
	return a.String()
}

// refHop is one hop of the reference parse: an address, or a hop that
// stops the walk.
type refHop struct {
	addr netip.Addr
	ok   bool
}

// refHost parses "addr", "addr:port" and "[v6]" with net/netip, and an
// obfuscated port by replacing it with 0.
func refHost(s string, obf bool) (netip.Addr, bool) {
	norm := func(a netip.Addr) (netip.Addr, bool) { return a.WithZone("").Unmap(), true }
	if a, err := netip.ParseAddr(s); err == nil {
		return norm(a)
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return norm(ap.Addr())
	}
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Is6() {
			return norm(a)
		}
	}
	if i := strings.LastIndex(s, ":_"); obf && i >= 0 && obfPortRE.MatchString(s[i+1:]) {
		if ap, err := netip.ParseAddrPort(s[:i] + ":0"); err == nil {
			return norm(ap.Addr())
		}
	}
	return netip.Addr{}, false
}

// refIPv4Peer is what parseIPv4Peer must accept, said with net/netip: an
// IPv4 address in its canonical text (netip rejects leading zeros, and
// String prints no zone), alone or with a port netip.ParseAddrPort reads
// (decimal, 0 to 65535, leading zeros allowed).
func refIPv4Peer(s string) (host string, a netip.Addr, ok bool) {
	host = s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return "", netip.Addr{}, false
		}
		host, a = s[:i], ap.Addr()
	} else {
		var err error
		if a, err = netip.ParseAddr(s); err != nil {
			return "", netip.Addr{}, false
		}
	}
	if !a.Is4() || a.String() != host {
		return "", netip.Addr{}, false
	}
	return host, a, true
}

// refXFF returns the hops of X-Forwarded-For lines, right to left.
func refXFF(lines []string) []refHop {
	var hops []refHop
	for i := len(lines) - 1; i >= 0; i-- {
		items := strings.Split(lines[i], ",")
		for j := len(items) - 1; j >= 0; j-- {
			item := strings.Trim(items[j], " \t")
			if item == "" {
				continue
			}
			a, ok := refHost(item, false)
			hops = append(hops, refHop{a, ok})
		}
	}
	return hops
}

// refSplit splits s on sep outside quoted strings, left to right. ok is
// false when a quoted string is not terminated or a backslash appears
// outside one (where reading from either end may disagree).
func refSplit(s string, sep byte) (parts []string, ok bool) {
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if !quoted {
				return nil, false
			}
			i++
		case c == '"':
			quoted = !quoted
		case c == sep && !quoted:
			parts = append(parts, s[start:i])
			start = i + 1
		}
	}
	if quoted {
		return nil, false
	}
	return append(parts, s[start:]), true
}

var (
	obfPortRE = regexp.MustCompile(`^_[A-Za-z0-9._-]+$`)
	tokenRE   = regexp.MustCompile("^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
	bareRE    = regexp.MustCompile(`^[^\x00-\x20\x7f",;]*$`)
)

// refForwardedFor parses one Forwarded element with refSplit and
// strings.Cut.
func refForwardedFor(elem string) (netip.Addr, bool) {
	pairs, ok := refSplit(elem, ';')
	if !ok {
		return netip.Addr{}, false
	}
	var node string
	found := false
	for _, p := range pairs {
		if p = strings.Trim(p, " \t"); p == "" {
			continue
		}
		name, value, ok := strings.Cut(p, "=")
		name, value = strings.Trim(name, " \t"), strings.Trim(value, " \t")
		if !ok || !tokenRE.MatchString(name) {
			return netip.Addr{}, false
		}
		escaped := false
		if strings.HasPrefix(value, `"`) {
			var b strings.Builder
			closed := false
			for i := 1; i < len(value); i++ {
				switch value[i] {
				case '\\':
					escaped = true
					i++
					continue
				case '"':
					closed = i == len(value)-1
					if !closed {
						return netip.Addr{}, false
					}
					continue
				}
				b.WriteByte(value[i])
			}
			if !closed {
				return netip.Addr{}, false
			}
			value = b.String()
		} else if !bareRE.MatchString(value) {
			return netip.Addr{}, false
		}
		if strings.EqualFold(name, "for") {
			if found || escaped {
				return netip.Addr{}, false
			}
			found, node = true, value
		}
	}
	if !found || strings.EqualFold(node, "unknown") || strings.HasPrefix(node, "_") {
		return netip.Addr{}, false
	}
	return refHost(node, true)
}

// refForwarded returns the hops of Forwarded lines, right to left, and
// false when a line is malformed as a whole (see refSplit).
func refForwarded(lines []string) ([]refHop, bool) {
	var hops []refHop
	for i := len(lines) - 1; i >= 0; i-- {
		elems, ok := refSplit(lines[i], ',')
		if !ok {
			return nil, false
		}
		for j := len(elems) - 1; j >= 0; j-- {
			elem := strings.Trim(elems[j], " \t")
			if elem == "" {
				continue
			}
			a, ok := refForwardedFor(elem)
			hops = append(hops, refHop{a, ok})
		}
	}
	return hops, true
}

// refWalk is the walk of the package documentation, over the chain
// [peer, hops...] (right to left).
func refWalk(c fuzzConfig, chain []refHop) (netip.Addr, bool) {
	if !chain[0].ok {
		if !c.trustNonIP {
			return netip.Addr{}, false
		}
		chain = chain[1:] // a trusted non-IP peer: start at the hop it names
	}
	var cur netip.Addr
	for _, h := range chain {
		if !h.ok {
			break
		}
		cur = h.addr
		if !c.trusts(cur) {
			break
		}
	}
	return cur, cur.IsValid()
}

func FuzzClientIP(f *testing.F) {
	seeds := []struct {
		peer, h1, h2 string
	}{
		{"203.0.113.7:54321", "1.2.3.4", ""},
		{"10.0.0.1:1", "1.2.3.4, 198.51.100.9, 10.0.0.3", "10.0.0.2"},
		{"10.0.0.1:1", "10.0.0.5, 10.0.0.3", ""},
		{"[::ffff:10.0.0.1]:443", "::ffff:198.51.100.9", ""},
		{"[2001:db8::1]:443", "2001:db8:1:2:3:4:5:6, [2001:db8::2]:80", "fe80::1%eth0"},
		{"10.0.0.1:1", "198.51.100.9, garbage, 10.0.0.2", ",, ,"},
		{"127.0.0.1", "unknown", "[198.51.100.9]"},
		{"@", "198.51.100.9", ""},
		{"", "", ""},
		{"10.0.0.1:1", `for=198.51.100.9;proto=https, for="[2001:db8::5]:4711"`, `for=10.0.0.3`},
		{"10.0.0.1:1", `for=198.51.100.9, for=_hidden, for=10.0.0.3`, `For="10.0.0.4:_p"`},
		{"10.0.0.1:1", `for="1.2.3.4, for=198.51.100.9`, `for=1.2.3.4;x="a\", b", for=10.0.0.3`},
		{"10.0.0.1:1", `for=unknown, by=x`, `for=[::1]:80;for=1.2.3.4`},
		// Peers the IPv4 fast path must leave to the full parser.
		{"010.0.0.1:1", "198.51.100.9", ""},
		{"10.0.0.256:1", "198.51.100.9", ""},
		{"10.0.0.1:", "198.51.100.9", ""},
		{"10.0.0.1:65536", "198.51.100.9", ""},
		{"10.0.0.1:1:2", "198.51.100.9", ""},
		{"10.0.0.1%eth0:1", "198.51.100.9", ""},
		{"1.2.3.4.5", "198.51.100.9", ""},
		{"1.2.3", "198.51.100.9", ""},
		{"0.0.0.0:0", "198.51.100.9", ""},
	}
	for _, s := range seeds {
		for _, mode := range []byte{0, 2, 3, 4, 5, 10, 11, 18, 19} {
			f.Add(s.peer, s.h1, s.h2, mode)
		}
	}
	f.Fuzz(func(t *testing.T, peer, h1, h2 string, mode byte) {
		c := fuzzConfigOf(mode)
		fn, err := ClientIP(c.options()...)
		if err != nil {
			t.Fatal(err)
		}
		name := "X-Forwarded-For"
		if c.forwarded {
			name = "Forwarded"
		}
		lines := []string{h1, h2}
		// Both headers are always sent: only the configured one may count.
		got, err := fn(Static{Peer: peer, Header: map[string][]string{"X-Forwarded-For": lines, "Forwarded": lines}})
		fatalf := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("mode %#x, peer %q, %s %q: "+format, append([]any{mode, peer, name, lines}, args...)...)
		}

		// The result is a valid canonical address or prefix, or an
		// error wrapping ErrNoAddress, never ErrNotApplicable.
		if err != nil {
			if !errors.Is(err, ErrNoAddress) || got != "" {
				fatalf("error %v (key %q), want only an error wrapping ErrNoAddress", err, got)
			}
		} else if c.group {
			p, perr := netip.ParsePrefix(got)
			if perr != nil || p.String() != got || p != p.Masked() || p.Addr().Is4In6() ||
				(p.Addr().Is4() && p.Bits() != 24) || (p.Addr().Is6() && p.Bits() != 64) {
				fatalf("key %q is not a canonical /24 or /64 prefix", got)
			}
		} else {
			a, aerr := netip.ParseAddr(got)
			if aerr != nil || a.String() != got || a.Zone() != "" || a.Is4In6() {
				fatalf("key %q is not a canonical address", got)
			}
		}

		peerAddr, peerOK := refHost(peer, false)
		// With no trusted proxy the key is the peer, whatever the headers.
		if len(c.trusted) == 0 && !c.trustNonIP {
			if peerOK && (err != nil || got != c.key(peerAddr)) {
				fatalf("no trusted proxy: key %q, %v; want the peer %q", got, err, c.key(peerAddr))
			}
			if !peerOK && err == nil {
				fatalf("no trusted proxy, non-IP peer: key %q, want an error", got)
			}
			return
		}
		// A client is named only by a trusted peer.
		if peerOK && !c.trusts(peerAddr) && (err != nil || got != c.key(peerAddr)) {
			fatalf("untrusted peer: key %q, %v; want the peer %q", got, err, c.key(peerAddr))
		}

		var hops []refHop
		wellFormed := true
		if c.forwarded {
			hops, wellFormed = refForwarded(lines)
		} else {
			hops = refXFF(lines)
		}
		if !wellFormed {
			// The reference cannot say where the elements are; the
			// invariants above are all that holds.
			return
		}
		chain := append([]refHop{{peerAddr, peerOK}}, hops...)
		// The key is the peer or one of the hops, and never a hop to
		// the left of an untrusted or unparsable one.
		if err == nil {
			var allowed []string
			for i, h := range chain {
				if !h.ok {
					if i == 0 {
						continue // a trusted non-IP peer
					}
					break
				}
				allowed = append(allowed, c.key(h.addr))
				if !c.trusts(h.addr) {
					break
				}
			}
			if !slices.Contains(allowed, got) {
				fatalf("key %q is not one of the hops the walk may reach, %q", got, allowed)
			}
		}
		// And it is exactly the reference's answer.
		want, ok := refWalk(c, chain)
		switch {
		case !ok && err == nil:
			fatalf("key %q, want an error (no client address)", got)
		case ok && (err != nil || got != c.key(want)):
			fatalf("key %q, %v; want %q", got, err, c.key(want))
		}
	})
}

func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer a.b-c_d~e+f/g==", "Bearer  x", "Basic abc", "Bearer", "Bearer a=b", " Bearer t\t", "Bearer\tt", "Bearerx t", ""} {
		f.Add(s)
	}
	ref := regexp.MustCompile(`^[ \t]*(?i:bearer) +([A-Za-z0-9._~+/-]+=*)[ \t]*$`)
	fn, short := must(BearerToken()), must(BearerToken(WithShortHash()))
	f.Fuzz(func(t *testing.T, v string) {
		r := Static{Header: map[string][]string{"Authorization": {v}}}
		got, err := fn(r)
		m := ref.FindStringSubmatch(v)
		if m == nil {
			if !errors.Is(err, ErrNotApplicable) || got != "" {
				t.Fatalf("BearerToken()(%q) = %q, %v; want ErrNotApplicable", v, got, err)
			}
			return
		}
		sum := sha256.Sum256([]byte(m[1]))
		if want := hex.EncodeToString(sum[:]); err != nil || got != want {
			t.Fatalf("BearerToken()(%q) = %q, %v; want %q", v, got, err, want)
		}
		if s, err := short(r); err != nil || s != got[:32] {
			t.Fatalf("BearerToken(WithShortHash())(%q) = %q, %v; want %q", v, s, err, got[:32])
		}
		if strings.Contains(got, m[1]) && len(m[1]) > 8 {
			t.Fatalf("BearerToken()(%q) = %q holds the token", v, got)
		}
	})
}

// unescapeCompose splits a Compose key back into its parts.
func unescapeCompose(k string) []string {
	var parts []string
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		switch k[i] {
		case '\\':
			i++
			b.WriteByte(k[i])
		case '|':
			parts = append(parts, b.String())
			b.Reset()
		default:
			b.WriteByte(k[i])
		}
	}
	return append(parts, b.String())
}

func FuzzCompose(f *testing.F) {
	f.Add("a", "b", "a", "b")
	f.Add("a|", "b", "a", "|b")
	f.Add(`a\`, "|b", `a\|`, "b")
	f.Add(`\|`, `|\`, `\`, `||\`)
	lit := func(s string) Func { return func(Request) (string, error) { return s, nil } }
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		k1, err1 := must(Compose(lit(a), lit(b)))(Static{})
		k2, err2 := must(Compose(lit(c), lit(d)))(Static{})
		for _, x := range []struct {
			k    string
			err  error
			p, q string
		}{{k1, err1, a, b}, {k2, err2, c, d}} {
			if x.p == "" || x.q == "" {
				if !errors.Is(x.err, ErrNotApplicable) || x.k != "" {
					t.Fatalf("Compose(%q, %q) = %q, %v; want ErrNotApplicable", x.p, x.q, x.k, x.err)
				}
				continue
			}
			if parts := unescapeCompose(x.k); x.err != nil || len(parts) != 2 || parts[0] != x.p || parts[1] != x.q {
				t.Fatalf("Compose(%q, %q) = %q, %v: splits into %q", x.p, x.q, x.k, x.err, unescapeCompose(x.k))
			}
		}
		if err1 == nil && err2 == nil && (k1 == k2) != (a == c && b == d) {
			t.Fatalf("Compose(%q, %q) = %q and Compose(%q, %q) = %q", a, b, k1, c, d, k2)
		}
	})
}

// FuzzIPv4Peer checks the IPv4 fast path against refIPv4Peer, which it
// must agree with exactly, and against parseHost, the full parser:
// whatever it accepts, parseHost accepts as the same address, whose
// canonical text is exactly the prefix it returns; and every canonical
// IPv4 peer, with or without a port, takes it.
func FuzzIPv4Peer(f *testing.F) {
	for _, s := range []string{"192.0.2.1:1234", "192.0.2.1", "0.0.0.0:0", "255.255.255.255:65535",
		"01.2.3.4", "1.2.3.256", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:x", "1.2.3.4:1:2", "1.2.3.4.5",
		"[::ffff:1.2.3.4]:1", "::ffff:1.2.3.4", "1.2.3.4%z:1", "1.2.3.4:0080", " 1.2.3.4", "1.2.3.4 ",
		"1.2.3", "1.2.3.4.", ":", ":65536", ":0", "1.2.3.4:000000000080", "1.2.3.1000", "1.2.3.00",
		"1.2.3.4:99999", "1.2.3.4:-1", "1.2.3.4:+1", "[1.2.3.4]:80", "1.2.3.4:18446744073709551616"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, a, ok := parseIPv4Peer(s)
		if rh, ra, rok := refIPv4Peer(s); host != rh || a != ra || ok != rok {
			t.Fatalf("parseIPv4Peer(%q) = %q, %v, %v; net/netip reads %q, %v, %v", s, host, a, ok, rh, ra, rok)
		}
		full, fullOK := parseHost(s, false)
		if ok {
			if !fullOK || full != a || !a.Is4() || a.String() != host || !strings.HasPrefix(s, host) {
				t.Fatalf("parseIPv4Peer(%q) = %q, %v; parseHost = %v, %v", s, host, a, full, fullOK)
			}
			return
		}
		// Rejected: it must not be a canonical IPv4 address with an
		// optional decimal port that parseHost takes as such.
		if fullOK && full.Is4() {
			h := s
			if i := strings.LastIndexByte(s, ':'); i >= 0 {
				h = s[:i]
			}
			if h == full.String() && !strings.ContainsAny(s, "[]%") && !strings.Contains(s[len(h):], "_") {
				t.Fatalf("parseIPv4Peer(%q) refused a canonical IPv4 peer that parseHost reads as %v", s, full)
			}
		}
	})
}
