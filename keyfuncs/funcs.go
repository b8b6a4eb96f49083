package keyfuncs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Header returns a Func whose key is the first value of the HTTP header (or
// gRPC metadata key) name, as sent. It returns ErrNotApplicable when the
// header is absent or its first value is empty, so a tier keyed by an
// optional header simply does not apply. The value is client-controlled:
// use it for identities a client may choose freely (a tenant it is bound
// to elsewhere), and APIKey for credentials, which must not reach the
// store. Header returns an error wrapping ErrInvalidOption when name is not
// a valid header name.
func Header(name string) (Func, error) {
	if !isToken(name) {
		return nil, fmt.Errorf("%w: Header: %q is not a header name", ErrInvalidOption, name)
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	return func(r Request) (string, error) { return first(r, name) }, nil
}

// Metadata returns a Func whose key is the first value of the gRPC metadata
// key, like Header (the two read the same Request.Values; Metadata only
// checks the key against gRPC's rules and passes it in lower case). Binary
// keys ("-bin") hold raw bytes, which a store rejects as a key unless
// hashed. Metadata returns an error wrapping ErrInvalidOption when key is
// not a valid metadata key: 1 or more of [a-z0-9-_.], upper case accepted
// and folded.
func Metadata(key string) (Func, error) {
	if key == "" || strings.Trim(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
		return nil, fmt.Errorf("%w: Metadata: %q is not a gRPC metadata key", ErrInvalidOption, key)
	}
	lower := strings.ToLower(key)
	return func(r Request) (string, error) { return first(r, lower) }, nil
}

func first(r Request, name string) (string, error) {
	vs := r.Values(name)
	if len(vs) == 0 || vs[0] == "" {
		return "", ErrNotApplicable
	}
	return vs[0], nil
}

// HashOption configures how APIKey and BearerToken hash credentials.
type HashOption interface {
	applyHash(*hashConfig)
}

type hashConfig struct{ short bool }

type hashOptionFunc func(*hashConfig)

func (f hashOptionFunc) applyHash(c *hashConfig) { f(c) }

// WithShortHash truncates the credential's hash to its first 32 hex
// characters (128 bits), plenty to tell credentials apart, for shorter
// store keys. The default is the full 64.
func WithShortHash() HashOption {
	return hashOptionFunc(func(c *hashConfig) { c.short = true })
}

func hashConfigOf(name string, opts []HashOption) (hashConfig, error) {
	var c hashConfig
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: %s: option %d is nil", ErrInvalidOption, name, i)
		}
		o.applyHash(&c)
	}
	return c, nil
}

// hash returns the lower-case hex SHA-256 of s, or its first 32 characters.
// A credential is hashed so that the raw value is never returned, logged as
// a key or written to a store.
func (c hashConfig) hash(s string) string {
	// Copying a credential of usual size to the stack spares the heap
	// copy of []byte(s).
	var in [256]byte
	data := in[:copy(in[:], s)]
	if len(s) > len(in) {
		data = []byte(s)
	}
	sum := sha256.Sum256(data)
	var buf [2 * sha256.Size]byte
	hex.Encode(buf[:], sum[:])
	if c.short {
		return string(buf[:32])
	}
	return string(buf[:])
}

// APIKey returns a Func whose key is the SHA-256 of the first value of the
// header that carries an API key (such as "X-API-Key"), as 64 lower-case
// hex characters (32 with WithShortHash). The raw key is never returned or
// kept. It returns ErrNotApplicable when the header is absent or empty.
// APIKey returns an error wrapping ErrInvalidOption when header is not a
// valid header name or an option is nil.
func APIKey(header string, opts ...HashOption) (Func, error) {
	if !isToken(header) {
		return nil, fmt.Errorf("%w: APIKey: %q is not a header name", ErrInvalidOption, header)
	}
	header = textproto.CanonicalMIMEHeaderKey(header)
	c, err := hashConfigOf("APIKey", opts)
	if err != nil {
		return nil, err
	}
	return func(r Request) (string, error) {
		v, err := first(r, header)
		if err != nil {
			return "", err
		}
		return c.hash(v), nil
	}, nil
}

// BearerToken returns a Func whose key is the SHA-256 of the bearer token in
// the first Authorization header, "Bearer <token>" (RFC 6750, section 2.1;
// the scheme is case-insensitive), as 64 lower-case hex characters (32
// with WithShortHash). The raw token is never returned or kept. It returns
// ErrNotApplicable when there is no Authorization header, when it uses
// another scheme, and when it is malformed: the token is not this tier's to
// judge, and authentication rejects the request anyway. It returns an error
// wrapping ErrInvalidOption when an option is nil.
func BearerToken(opts ...HashOption) (Func, error) {
	c, err := hashConfigOf("BearerToken", opts)
	if err != nil {
		return nil, err
	}
	return func(r Request) (string, error) {
		vs := r.Values("Authorization")
		if len(vs) == 0 {
			return "", ErrNotApplicable
		}
		tok, ok := bearer(vs[0])
		if !ok {
			return "", ErrNotApplicable
		}
		return c.hash(tok), nil
	}, nil
}

// bearer returns the token of a "Bearer" credential: the scheme, one or
// more spaces, then a b64token, 1*(ALPHA / DIGIT / "-" / "." / "_" / "~" /
// "+" / "/") *"=" (RFC 6750, section 2.1).
func bearer(v string) (string, bool) {
	v = trimOWS(v)
	const scheme = "Bearer"
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) || v[len(scheme)] != ' ' {
		return "", false
	}
	tok := strings.TrimLeft(v[len(scheme):], " ")
	end := strings.TrimRight(tok, "=")
	if end == "" {
		return "", false
	}
	for i := 0; i < len(end); i++ {
		c := end[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return "", false
		}
	}
	return tok, true
}

// Route returns a Func whose key is the route template (Request.Route),
// such as "/items/{id}". It returns ErrNotApplicable
// when the route is unknown (no route matched, or gRPC). It never falls
// back to the request path: a client could then create a bucket per path
// it invents.
func Route() Func {
	return func(r Request) (string, error) {
		if rt := r.Route(); rt != "" {
			return rt, nil
		}
		return "", ErrNotApplicable
	}
}

// Method returns a Func whose key is the HTTP method. A method other than
// the nine of RFC 9110 (section 9) and RFC 5789 (GET, HEAD, POST, PUT,
// DELETE, CONNECT, OPTIONS, TRACE, PATCH) is keyed "OTHER": methods are
// client-chosen tokens, and a client must not get a fresh bucket per
// method it invents. It returns ErrNotApplicable for gRPC.
func Method() Func {
	return func(r Request) (string, error) {
		if m := method(r); m != "" {
			return m, nil
		}
		return "", ErrNotApplicable
	}
}

func method(r Request) string {
	switch m := r.Method(); m {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "":
		return m
	}
	return "OTHER"
}

// MethodAndRoute returns a Func whose key is the method and the route
// template, "GET /items/{id}": the method, as Method keys it, a space and
// the route. A HEAD request counts as GET, which routers serve it with
// (as a GET route selector selects HEAD too), so that it cannot take a
// bucket of its own. A template that already names a method (a net/http
// pattern, from a view that reports it whole) is the key as it is. It
// returns ErrNotApplicable when the route or the method is unknown.
func MethodAndRoute() Func {
	return func(r Request) (string, error) { return methodAndRoute(r) }
}

func methodAndRoute(r Request) (string, error) {
	rt := r.Route()
	if rt == "" {
		return "", ErrNotApplicable
	}
	// A net/http pattern is "[METHOD ][HOST]/[PATH]": a method is a
	// word before the first blank, and a word with no "/".
	if i := strings.IndexAny(rt, " \t"); i > 0 && !strings.Contains(rt[:i], "/") {
		return rt, nil
	}
	m := method(r)
	switch m {
	case "":
		return "", ErrNotApplicable
	case "HEAD":
		m = "GET"
	}
	return endpoints.join(m, rt), nil
}

// endpoints caches "METHOD route" keys, so that keying a request by its
// endpoint allocates nothing: methods are the ten Method returns, and route
// templates are the server's own, a small fixed set. Each method's map is
// replaced whole on insertion (copy on write), so lookups take no lock.
var endpoints endpointCache

// maxEndpoints bounds each method's cache, should a router report more
// templates than any server has; past it keys are built on every call.
const maxEndpoints = 4096

type endpointCache struct {
	mu     sync.Mutex
	byVerb [10]atomic.Pointer[map[string]string]
}

var verbs = [10]string{"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", "OTHER"}

func (c *endpointCache) join(m, route string) string {
	i := slices.Index(verbs[:], m)
	if i < 0 {
		return m + " " + route
	}
	if mp := c.byVerb[i].Load(); mp != nil {
		if k, ok := (*mp)[route]; ok {
			return k
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.byVerb[i].Load()
	if old != nil {
		if k, ok := (*old)[route]; ok {
			return k
		}
		if len(*old) >= maxEndpoints {
			return m + " " + route
		}
	}
	k := m + " " + route
	next := make(map[string]string, 1+lenOf(old))
	if old != nil {
		for r, v := range *old {
			next[r] = v
		}
	}
	next[strings.Clone(route)] = k
	c.byVerb[i].Store(&next)
	return k
}

func lenOf(m *map[string]string) int {
	if m == nil {
		return 0
	}
	return len(*m)
}

// Endpoint returns a Func whose key is the endpoint of any request, as
// core's endpoint scope counts it: the gRPC method for gRPC, otherwise
// MethodAndRoute's key. It returns ErrNotApplicable when neither is known.
func Endpoint() Func {
	return func(r Request) (string, error) {
		if fm := r.FullMethod(); fm != "" {
			return fm, nil
		}
		return methodAndRoute(r)
	}
}

// GRPCMethod returns a Func whose key is the full gRPC method,
// "/package.Service/Method". It returns ErrNotApplicable for HTTP.
func GRPCMethod() Func {
	return func(r Request) (string, error) {
		if fm := r.FullMethod(); fm != "" {
			return fm, nil
		}
		return "", ErrNotApplicable
	}
}

// Constant returns a Func whose key is always v: one bucket for every
// request, for a global tier or a fixed part of a Compose. Constant returns
// an error wrapping ErrInvalidOption when v is empty or holds an ASCII
// control character.
func Constant(v string) (Func, error) {
	if v == "" {
		return nil, fmt.Errorf("%w: Constant: the key must not be empty", ErrInvalidOption)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < ' ' || v[i] == 0x7f {
			return nil, fmt.Errorf("%w: Constant: control character %#x at byte %d", ErrInvalidOption, v[i], i)
		}
	}
	return func(Request) (string, error) { return v, nil }, nil
}

// FromContext returns a Func whose key is the value stored under key in the
// request's context, typically the authenticated user put there by an
// authentication middleware. The value may be a string, a type whose
// underlying type is string, or a fmt.Stringer. The Func returns
// ErrNotApplicable when the value is missing, empty or a nil pointer, and
// an error wrapping ErrValueType for a value of any other type.
// FromContext returns an error wrapping ErrInvalidOption when key is nil or
// not comparable (context.WithValue's rules for keys).
func FromContext(key any) (Func, error) {
	if key == nil {
		return nil, fmt.Errorf("%w: FromContext: the key must not be nil", ErrInvalidOption)
	}
	if !reflect.TypeOf(key).Comparable() {
		return nil, fmt.Errorf("%w: FromContext: key of type %T is not comparable", ErrInvalidOption, key)
	}
	return func(r Request) (string, error) {
		var s string
		switch v := r.Context().Value(key).(type) {
		case nil:
			return "", ErrNotApplicable
		case string:
			s = v
		case fmt.Stringer:
			if rv := reflect.ValueOf(v); isNil(rv) {
				return "", ErrNotApplicable
			}
			s = v.String()
		default:
			rv := reflect.ValueOf(v)
			if rv.Kind() != reflect.String {
				return "", fmt.Errorf("%w: FromContext: value of type %T", ErrValueType, v)
			}
			s = rv.String()
		}
		if s == "" {
			return "", ErrNotApplicable
		}
		return s, nil
	}, nil
}

func isNil(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// Compose returns a Func whose key joins the keys of fns, in order, with
// "|", each part escaped ("\" becomes "\\" and "|" becomes "\|") so that
// distinct parts always give distinct keys: per user per route is
// Compose(user, route). The parts are evaluated in order; when one is not
// applicable (ErrNotApplicable or an empty key) the composition is not
// applicable, and when one fails its error is returned, wrapped with the
// part's position, and the remaining parts are not evaluated. Compose
// returns an error wrapping ErrInvalidOption when fns is empty or holds a
// nil Func.
func Compose(fns ...Func) (Func, error) {
	if len(fns) == 0 {
		return nil, fmt.Errorf("%w: Compose: no Func given", ErrInvalidOption)
	}
	for i, fn := range fns {
		if fn == nil {
			return nil, fmt.Errorf("%w: Compose: Func %d is nil", ErrInvalidOption, i)
		}
	}
	fns = append([]Func(nil), fns...)
	return func(r Request) (string, error) {
		var buf [128]byte
		b := buf[:0]
		for i, fn := range fns {
			s, err := fn(r)
			if err != nil {
				if err == ErrNotApplicable || errors.Is(err, ErrNotApplicable) {
					return "", ErrNotApplicable
				}
				return "", fmt.Errorf("keyfuncs: Compose part %d: %w", i, err)
			}
			if s == "" {
				return "", ErrNotApplicable
			}
			if i > 0 {
				b = append(b, composeSep)
			}
			b = appendEscaped(b, s)
		}
		return string(b), nil
	}, nil
}

const (
	composeSep    = '|'
	composeEscape = '\\'
)

func appendEscaped(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == composeSep || c == composeEscape {
			b = append(b, composeEscape)
		}
		b = append(b, s[i])
	}
	return b
}
