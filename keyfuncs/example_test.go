package keyfuncs_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/bucketry/ratelimit/keyfuncs"
)

// Behind a load balancer at 10.0.0.1, the client is the rightmost address
// the trusted proxies did not write: the leftmost one is whatever the
// client chose to send.
func ExampleClientIP() {
	clientIP, err := keyfuncs.ClientIP(
		keyfuncs.WithTrustedProxies("10.0.0.0/8"),
		keyfuncs.WithIPv6Prefix(64),
	)
	if err != nil {
		panic(err)
	}
	for _, r := range []keyfuncs.Static{
		// A direct client: the TCP peer, headers ignored.
		{Peer: "203.0.113.7:51234", Header: map[string][]string{"X-Forwarded-For": {"1.2.3.4"}}},
		// Through the load balancer, with a forged first entry.
		{Peer: "10.0.0.1:40000", Header: map[string][]string{"X-Forwarded-For": {"1.2.3.4, 198.51.100.9"}}},
		// Through two proxies of ours, from IPv6: keyed by the /64.
		{Peer: "10.0.0.1:40000", Header: map[string][]string{"X-Forwarded-For": {"2001:db8:1:2:3:4:5:6, 10.0.0.2"}}},
	} {
		key, err := clientIP(r)
		fmt.Println(key, err)
	}
	// Output:
	// 203.0.113.7 <nil>
	// 198.51.100.9 <nil>
	// 2001:db8:1:2::/64 <nil>
}

// The bearer token is keyed by its hash; a request without one is not
// subject to the per-token tier.
func ExampleBearerToken() {
	token, err := keyfuncs.BearerToken(keyfuncs.WithShortHash())
	if err != nil {
		panic(err)
	}
	key, err := token(keyfuncs.Static{Header: map[string][]string{"Authorization": {"Bearer s3cr3t-token"}}})
	fmt.Println(key, err)
	_, err = token(keyfuncs.Static{})
	fmt.Println(errors.Is(err, keyfuncs.ErrNotApplicable))
	// Output:
	// fb07916a0e7daf7f3f4823b7773f85a8 <nil>
	// true
}

type userKey struct{}

// A tier per user per endpoint: anonymous requests are not subject to it.
func ExampleCompose() {
	user, err := keyfuncs.FromContext(userKey{})
	if err != nil {
		panic(err)
	}
	perUserEndpoint, err := keyfuncs.Compose(user, keyfuncs.Endpoint())
	if err != nil {
		panic(err)
	}
	ctx := context.WithValue(context.Background(), userKey{}, "alice|admin")
	for _, r := range []keyfuncs.Static{
		{Ctx: ctx, HTTPMethod: "GET", RouteTemplate: "/items/:id"},
		{Ctx: ctx, RPCMethod: "/shop.Items/Get"},
		{HTTPMethod: "GET", RouteTemplate: "/items/:id"}, // anonymous
	} {
		key, err := perUserEndpoint(r)
		fmt.Printf("%q %v\n", key, err)
	}
	// Output:
	// "alice\\|admin|GET /items/:id" <nil>
	// "alice\\|admin|/shop.Items/Get" <nil>
	// "" keyfuncs: tier does not apply
}
