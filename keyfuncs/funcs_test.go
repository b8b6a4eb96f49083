package keyfuncs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// check runs fn on r and compares with want: a key, or the error wanted
// (ErrNotApplicable, or another sentinel matched with errors.Is).
func check(t *testing.T, call string, fn Func, r Request, want string, wantErr error) {
	t.Helper()
	got, err := fn(r)
	if wantErr != nil {
		if !errors.Is(err, wantErr) || got != "" {
			t.Fatalf("%s = %q, %v; want error %v", call, got, err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		t.Fatalf("%s = %q, %v; want %q", call, got, err, want)
	}
}

func must(fn Func, err error) Func {
	if err != nil {
		panic(err)
	}
	return fn
}

func TestHeader(t *testing.T) {
	tests := []struct {
		name    string
		header  string
		req     Static
		want    string
		wantErr error
	}{
		{"present", "X-Tenant", Static{Header: map[string][]string{"X-Tenant": {"acme"}}}, "acme", nil},
		{"first of several lines", "X-Tenant", Static{Header: map[string][]string{"X-Tenant": {"acme", "globex"}}}, "acme", nil},
		{"first line kept whole", "X-Tenant", Static{Header: map[string][]string{"X-Tenant": {"acme, globex"}}}, "acme, globex", nil},
		{"name case-insensitive", "x-tenant", Static{Header: map[string][]string{"X-Tenant": {"acme"}}}, "acme", nil},
		{"absent", "X-Tenant", Static{}, "", ErrNotApplicable},
		{"empty", "X-Tenant", Static{Header: map[string][]string{"X-Tenant": {""}}}, "", ErrNotApplicable},
		{"no lines", "X-Tenant", Static{Header: map[string][]string{"X-Tenant": {}}}, "", ErrNotApplicable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := Header(tt.header)
			if err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("Header(%q)", tt.header), fn, tt.req, tt.want, tt.wantErr)
		})
	}
}

func TestMetadata(t *testing.T) {
	md := Static{RPCMethod: "/pkg.S/M", Header: map[string][]string{"tenant-id": {"acme", "x"}, "empty": {""}}}
	tests := []struct {
		name    string
		key     string
		want    string
		wantErr error
	}{
		{"present", "tenant-id", "acme", nil},
		{"upper case folded", "Tenant-ID", "acme", nil},
		{"absent", "user", "", ErrNotApplicable},
		{"empty", "empty", "", ErrNotApplicable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, fmt.Sprintf("Metadata(%q)", tt.key), must(Metadata(tt.key)), md, tt.want, tt.wantErr)
		})
	}
	r := &recorder{Static: md}
	if _, err := must(Metadata("Tenant-ID"))(r); err != nil || len(r.names) != 1 || r.names[0] != "tenant-id" {
		t.Errorf(`Metadata("Tenant-ID") looked up %q, %v; want ["tenant-id"]`, r.names, err)
	}
}

func TestHashedCredentials(t *testing.T) {
	const (
		secret = "s3cr3t-token"
		hash   = "fb07916a0e7daf7f3f4823b7773f85a839a8dd46fbf3858b8f53d3fa463c8ef3" // printf %s "$secret" | sha256sum
	)
	if got := (hashConfig{}).hash(secret); got != hash {
		t.Fatalf("hash(%q) = %q, want %q", secret, got, hash)
	}
	short := hash[:32]
	auth := func(v ...string) Static { return Static{Header: map[string][]string{"Authorization": v}} }
	tests := []struct {
		name    string
		fn      Func
		req     Static
		want    string
		wantErr error
	}{
		{"APIKey", must(APIKey("X-API-Key")), Static{Header: map[string][]string{"X-Api-Key": {secret}}}, hash, nil},
		{"APIKey short", must(APIKey("x-api-key", WithShortHash())), Static{Header: map[string][]string{"X-Api-Key": {secret}}}, short, nil},
		{"APIKey first of several", must(APIKey("X-API-Key")), Static{Header: map[string][]string{"X-Api-Key": {secret, "other"}}}, hash, nil},
		{"APIKey absent", must(APIKey("X-API-Key")), Static{}, "", ErrNotApplicable},
		{"APIKey empty", must(APIKey("X-API-Key")), Static{Header: map[string][]string{"X-Api-Key": {""}}}, "", ErrNotApplicable},
		{"Bearer", must(BearerToken()), auth("Bearer " + secret), hash, nil},
		{"Bearer short", must(BearerToken(WithShortHash())), auth("Bearer " + secret), short, nil},
		{"Bearer scheme case-insensitive", must(BearerToken()), auth("bEaReR " + secret), hash, nil},
		{"Bearer several spaces", must(BearerToken()), auth("Bearer   " + secret), hash, nil},
		{"Bearer surrounding blanks", must(BearerToken()), auth(" Bearer " + secret + "\t"), hash, nil},
		{"Bearer first line", must(BearerToken()), auth("Bearer "+secret, "Bearer other"), hash, nil},
		{"Bearer b64token with padding", must(BearerToken()), auth("Bearer aB9-._~+/=="), hashConfig{}.hash("aB9-._~+/=="), nil},
		{"Bearer JWT", must(BearerToken()), auth("Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.c2ln"), hashConfig{}.hash("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.c2ln"), nil},
		{"no Authorization", must(BearerToken()), Static{}, "", ErrNotApplicable},
		{"empty Authorization", must(BearerToken()), auth(""), "", ErrNotApplicable},
		{"Basic scheme", must(BearerToken()), auth("Basic dXNlcjpwYXNz"), "", ErrNotApplicable},
		{"scheme only", must(BearerToken()), auth("Bearer"), "", ErrNotApplicable},
		{"scheme and blank", must(BearerToken()), auth("Bearer "), "", ErrNotApplicable},
		{"no space", must(BearerToken()), auth("Bearer" + secret), "", ErrNotApplicable},
		{"tab instead of space", must(BearerToken()), auth("Bearer\t" + secret), "", ErrNotApplicable},
		{"space in token", must(BearerToken()), auth("Bearer abc def"), "", ErrNotApplicable},
		{"padding only", must(BearerToken()), auth("Bearer =="), "", ErrNotApplicable},
		{"padding inside", must(BearerToken()), auth("Bearer ab=cd"), "", ErrNotApplicable},
		{"bad character", must(BearerToken()), auth("Bearer abc,def"), "", ErrNotApplicable},
		{"token only", must(BearerToken()), auth(secret), "", ErrNotApplicable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.name, tt.fn, tt.req, tt.want, tt.wantErr)
		})
	}
}

func TestRouteMethodEndpoint(t *testing.T) {
	httpReq := Static{HTTPMethod: "GET", RouteTemplate: "/items/:id"}
	withMethod := Static{HTTPMethod: "HEAD", RouteTemplate: "GET /items/{id}"}
	withHost := Static{HTTPMethod: "POST", RouteTemplate: "example.com/items/{id}"}
	custom := Static{HTTPMethod: "PROPFIND", RouteTemplate: "/dav/{path...}"}
	noRoute := Static{HTTPMethod: "GET"}
	grpcReq := Static{RPCMethod: "/pkg.Items/Get"}
	tests := []struct {
		name    string
		fn      Func
		req     Static
		want    string
		wantErr error
	}{
		{"Route", Route(), httpReq, "/items/:id", nil},
		{"Route with method", Route(), withMethod, "GET /items/{id}", nil},
		{"Route unknown", Route(), noRoute, "", ErrNotApplicable},
		{"Route gRPC", Route(), grpcReq, "", ErrNotApplicable},
		{"Method", Method(), httpReq, "GET", nil},
		{"Method PATCH", Method(), Static{HTTPMethod: "PATCH"}, "PATCH", nil},
		{"Method unregistered is OTHER", Method(), custom, "OTHER", nil},
		{"Method lower case is OTHER", Method(), Static{HTTPMethod: "get"}, "OTHER", nil},
		{"Method gRPC", Method(), grpcReq, "", ErrNotApplicable},
		{"MethodAndRoute", MethodAndRoute(), httpReq, "GET /items/:id", nil},
		{"MethodAndRoute template with method", MethodAndRoute(), withMethod, "GET /items/{id}", nil},
		{"MethodAndRoute template with host", MethodAndRoute(), withHost, "POST example.com/items/{id}", nil},
		{"MethodAndRoute unregistered method", MethodAndRoute(), custom, "OTHER /dav/{path...}", nil},
		{"MethodAndRoute no route", MethodAndRoute(), noRoute, "", ErrNotApplicable},
		{"MethodAndRoute no method", MethodAndRoute(), Static{RouteTemplate: "/x"}, "", ErrNotApplicable},
		{"MethodAndRoute gRPC", MethodAndRoute(), grpcReq, "", ErrNotApplicable},
		{"GRPCMethod", GRPCMethod(), grpcReq, "/pkg.Items/Get", nil},
		{"GRPCMethod HTTP", GRPCMethod(), httpReq, "", ErrNotApplicable},
		{"Endpoint gRPC", Endpoint(), grpcReq, "/pkg.Items/Get", nil},
		{"Endpoint HTTP", Endpoint(), httpReq, "GET /items/:id", nil},
		{"Endpoint HTTP template with method", Endpoint(), withMethod, "GET /items/{id}", nil},
		{"Endpoint unknown", Endpoint(), noRoute, "", ErrNotApplicable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.name, tt.fn, tt.req, tt.want, tt.wantErr)
		})
	}
}

type ctxKey struct{ name string }

type userID string

type user struct{ id string }

func (u *user) String() string { return u.id }

func TestFromContext(t *testing.T) {
	key := &ctxKey{"user"}
	with := func(v any) Static { return Static{Ctx: context.WithValue(context.Background(), key, v)} }
	var nilUser *user
	tests := []struct {
		name    string
		req     Static
		want    string
		wantErr error
	}{
		{"string", with("alice"), "alice", nil},
		{"named string type", with(userID("bob")), "bob", nil},
		{"Stringer", with(&user{"carol"}), "carol", nil},
		{"missing", Static{}, "", ErrNotApplicable},
		{"other key", Static{Ctx: context.WithValue(context.Background(), &ctxKey{"user"}, "eve")}, "", ErrNotApplicable},
		{"empty string", with(""), "", ErrNotApplicable},
		{"empty Stringer", with(&user{}), "", ErrNotApplicable},
		{"nil Stringer", with(nilUser), "", ErrNotApplicable},
		{"int", with(42), "", ErrValueType},
		{"struct", with(struct{ ID string }{"x"}), "", ErrValueType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.name, must(FromContext(key)), tt.req, tt.want, tt.wantErr)
		})
	}
}

func TestConstant(t *testing.T) {
	fn := must(Constant("global"))
	for _, r := range []Static{{}, {HTTPMethod: "GET", Peer: "1.2.3.4:5"}, {RPCMethod: "/a.B/C"}} {
		check(t, `Constant("global")`, fn, r, "global", nil)
	}
}

func TestCompose(t *testing.T) {
	key := &ctxKey{"user"}
	user := must(FromContext(key))
	lit := func(s string) Func { return func(Request) (string, error) { return s, nil } }
	boom := errors.New("boom")
	failing := func(Request) (string, error) { return "", boom }
	wrappedNA := func(Request) (string, error) { return "", fmt.Errorf("custom: %w", ErrNotApplicable) }
	called := false
	spy := func(Request) (string, error) { called = true; return "x", nil }
	req := Static{
		Ctx:           context.WithValue(context.Background(), key, "alice"),
		HTTPMethod:    "GET",
		RouteTemplate: "/items/:id",
	}
	tests := []struct {
		name    string
		fns     []Func
		want    string
		wantErr error
	}{
		{"user and route", []Func{user, MethodAndRoute()}, "alice|GET /items/:id", nil},
		{"one part", []Func{user}, "alice", nil},
		{"separator escaped", []Func{lit("a|b"), lit("c")}, `a\|b|c`, nil},
		{"escape escaped", []Func{lit(`a\`), lit("|b")}, `a\\|\|b`, nil},
		{"long parts", []Func{lit(strings.Repeat("a", 200)), lit(strings.Repeat("b", 200))}, strings.Repeat("a", 200) + "|" + strings.Repeat("b", 200), nil},
		{"not applicable part", []Func{user, GRPCMethod()}, "", ErrNotApplicable},
		{"wrapped not applicable", []Func{user, wrappedNA}, "", ErrNotApplicable},
		{"empty part is not applicable", []Func{user, lit("")}, "", ErrNotApplicable},
		{"failing part", []Func{user, failing}, "", boom},
		{"stops at the first not applicable", []Func{GRPCMethod(), spy}, "", ErrNotApplicable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, tt.name, must(Compose(tt.fns...)), req, tt.want, tt.wantErr)
		})
	}
	if called {
		t.Error("Compose evaluated a part after one that was not applicable")
	}
	_, err := must(Compose(user, failing))(req)
	if msg := fmt.Sprint(err); msg != "keyfuncs: Compose part 1: boom" {
		t.Errorf("Compose(user, failing) error = %q, want %q", msg, "keyfuncs: Compose part 1: boom")
	}
	// The Funcs given are copied: changing the caller's slice later changes
	// nothing.
	fns := []Func{lit("a"), lit("b")}
	fn := must(Compose(fns...))
	fns[1] = lit("z")
	check(t, "Compose after the slice changed", fn, req, "a|b", nil)
}

func TestConstructorErrors(t *testing.T) {
	tests := []struct {
		name string
		call func() (Func, error)
		want string // in the message
	}{
		{"Header empty", func() (Func, error) { return Header("") }, "Header"},
		{"Header with colon", func() (Func, error) { return Header("X-Tenant:") }, `"X-Tenant:"`},
		{"Header with space", func() (Func, error) { return Header("X Tenant") }, "Header"},
		{"Metadata empty", func() (Func, error) { return Metadata("") }, "Metadata"},
		{"Metadata bad character", func() (Func, error) { return Metadata("tenant id") }, `"tenant id"`},
		{"Metadata non-ASCII", func() (Func, error) { return Metadata("\u212a") }, "Metadata"},
		{"APIKey empty header", func() (Func, error) { return APIKey("") }, "APIKey"},
		{"APIKey bad header", func() (Func, error) { return APIKey("X-API-Key\n") }, "APIKey"},
		{"Constant empty", func() (Func, error) { return Constant("") }, "Constant"},
		{"Constant control character", func() (Func, error) { return Constant("a\nb") }, "0xa at byte 1"},
		{"Constant DEL", func() (Func, error) { return Constant("a\x7f") }, "Constant"},
		{"FromContext nil key", func() (Func, error) { return FromContext(nil) }, "FromContext"},
		{"FromContext incomparable key", func() (Func, error) { return FromContext([]string{"k"}) }, "not comparable"},
		{"Compose nothing", func() (Func, error) { return Compose() }, "Compose"},
		{"Compose nil", func() (Func, error) { return Compose(Route(), nil) }, "Func 1 is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, err := tt.call()
			if !errors.Is(err, ErrInvalidOption) || fn != nil {
				t.Fatalf("%s = %v, %v; want an error wrapping ErrInvalidOption", tt.name, fn != nil, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "ratelimit: invalid option: ") || !strings.Contains(msg, tt.want) {
				t.Errorf("%s error = %q, want it to contain %q", tt.name, msg, tt.want)
			}
		})
	}
}

func TestStatic(t *testing.T) {
	var zero Static
	if zero.Context() == nil {
		t.Error("Static{}.Context() = nil, want context.Background()")
	}
	ctx := context.WithValue(context.Background(), &ctxKey{}, 1)
	s := Static{Ctx: ctx, HTTPMethod: "GET", RouteTemplate: "/r", RPCMethod: "/a.B/C", Peer: "p", Header: map[string][]string{
		"X-A": {"1"}, "x-a": {"2", "3"}, "X-B": {"4"},
	}}
	if s.Context() != ctx || s.Method() != "GET" || s.Route() != "/r" || s.FullMethod() != "/a.B/C" || s.RemoteAddr() != "p" {
		t.Errorf("Static accessors = %v %q %q %q %q", s.Context(), s.Method(), s.Route(), s.FullMethod(), s.RemoteAddr())
	}
	for _, tt := range []struct {
		name string
		want []string
	}{
		{"X-B", []string{"4"}},
		{"x-b", []string{"4"}},
		{"X-A", []string{"1"}},           // an exact key wins
		{"X-a", []string{"1", "2", "3"}}, // else every match, in sorted key order: "X-A" < "x-a"
		{"X-C", nil},
	} {
		if got := s.Values(tt.name); fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("Values(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestConcurrentUse runs every Func from many goroutines at once, for the
// race detector.
func TestConcurrentUse(t *testing.T) {
	key := &ctxKey{"user"}
	fns := []Func{
		must(ClientIP(proxies, WithIPv6Prefix(64))),
		must(Header("X-Tenant")),
		must(APIKey("X-API-Key")),
		must(BearerToken()),
		Route(), Method(), MethodAndRoute(), Endpoint(), GRPCMethod(),
		must(Constant("global")),
		must(FromContext(key)),
	}
	fns = append(fns, must(Compose(fns...)))
	req := Static{
		Ctx:           context.WithValue(context.Background(), key, "alice"),
		HTTPMethod:    "GET",
		RouteTemplate: "/items/:id",
		Peer:          "10.0.0.1:1",
		Header: map[string][]string{
			"X-Forwarded-For": {"2001:db8::1, 10.0.0.2"},
			"X-Tenant":        {"acme"},
			"X-Api-Key":       {"k"},
			"Authorization":   {"Bearer t"},
		},
	}
	want := make([]string, len(fns))
	for i, fn := range fns {
		want[i], _ = fn(req)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				for i, fn := range fns {
					if got, _ := fn(req); got != want[i] {
						t.Errorf("Func %d = %q, want %q", i, got, want[i])
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

func TestHashOptionsNil(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func() (Func, error)
		in   string
	}{
		{"APIKey", func() (Func, error) { return APIKey("X-API-Key", WithShortHash(), nil) }, "APIKey: option 1 is nil"},
		{"BearerToken", func() (Func, error) { return BearerToken(nil) }, "BearerToken: option 0 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fn, err := tc.make()
			if fn != nil || !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("%s with a nil option = %v, %v; want ErrInvalidOption mentioning %q", tc.name, fn != nil, err, tc.in)
			}
		})
	}
}
