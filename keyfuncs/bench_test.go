package keyfuncs

import (
	"context"
	"testing"
)

// benchRequests are a client behind two trusted proxies, so that the walk
// reads three X-Forwarded-For hops (the forged one is never reached), and
// the same chain in RFC 7239 syntax.
var (
	benchXFF Request = Static{Peer: "10.0.0.1:40000", Header: map[string][]string{
		"X-Forwarded-For": {"1.2.3.4, 198.51.100.9, 10.0.0.3, 10.0.0.2"},
	}}
	benchForwarded Request = Static{Peer: "10.0.0.1:40000", Header: map[string][]string{
		"Forwarded": {`for=1.2.3.4, for=198.51.100.9;proto=https, for="[2001:db8:ffff::3]:4711", for=10.0.0.2`},
	}}
)

func benchFunc(b *testing.B, fn Func, r Request, want string) {
	b.Helper()
	if got, err := fn(r); err != nil || got != want {
		b.Fatalf("key = %q, %v; want %q", got, err, want)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fn(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := fn(r); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkClientIP(b *testing.B) {
	b.Run("XFF-3-hops", func(b *testing.B) {
		benchFunc(b, must(ClientIP(proxies)), benchXFF, "198.51.100.9")
	})
	b.Run("XFF-3-hops-IPv6-64", func(b *testing.B) {
		r := Static{Peer: "10.0.0.1:40000", Header: map[string][]string{
			"X-Forwarded-For": {"1.2.3.4, 2001:db8:1:2:3:4:5:6, 10.0.0.3, 10.0.0.2"},
		}}
		benchFunc(b, must(ClientIP(proxies, WithIPv6Prefix(64))), r, "2001:db8:1:2::/64")
	})
	b.Run("Forwarded-3-hops", func(b *testing.B) {
		benchFunc(b, must(ClientIP(proxies, WithProxyHeader("Forwarded"))), benchForwarded, "198.51.100.9")
	})
	b.Run("untrusted-peer", func(b *testing.B) {
		benchFunc(b, must(ClientIP()), benchXFF, "10.0.0.1")
	})
}

func BenchmarkBearerToken(b *testing.B) {
	r := Static{Header: map[string][]string{"Authorization": {"Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.c2ln"}}}
	benchFunc(b, must(BearerToken(WithShortHash())), r, "b4c65f950b05ab31ad61e1817d9907c2")
}

func BenchmarkCompose(b *testing.B) {
	type key struct{}
	r := Static{
		Ctx:           context.WithValue(context.Background(), key{}, "alice"),
		HTTPMethod:    "GET",
		RouteTemplate: "/items/:id",
	}
	benchFunc(b, must(Compose(must(FromContext(key{})), MethodAndRoute())), r, "alice|GET /items/:id")
}
