package core

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"
)

// This file turns a Decision into what an HTTP client sees: header fields and
// an application/problem+json body. Adapters (net/http, gin, fiber, ...) call
// it; none formats a header itself.
//
// References:
//   - RFC 9110 section 10.2.3: Retry-After as delay-seconds.
//   - RFC 9651 (Structured Field Values): the List, String and Integer
//     serializations used by RateLimit-Policy and RateLimit.
//   - RFC 9457: problem details.
//   - draft-ietf-httpapi-ratelimit-headers-11 (below "the draft"): the
//     RateLimit-Policy (section 3) and RateLimit (section 4) fields and the
//     quota-exceeded problem type (section 5.1).

// ContentTypeProblem is the media type of the bodies AppendProblem writes
// (RFC 9457 section 3).
const ContentTypeProblem = "application/problem+json"

// ProblemTypeQuotaExceeded is the problem type of a 429 body, registered by
// the draft (section 10.2.1).
const ProblemTypeQuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// HTTP status codes returned by HeaderFormat.Status, spelled out so that core
// needs no net/http.
const (
	statusTooManyRequests    = 429
	statusServiceUnavailable = 503
)

// ResetFormat says how X-RateLimit-Reset expresses the time at which the
// deciding tier is full again. The zero value is ResetUnix.
type ResetFormat uint8

const (
	// ResetUnix sends Unix epoch seconds, rounded up, as GitHub does,
	// counted from Decision.At. The default.
	ResetUnix ResetFormat = iota
	// ResetDelta sends the seconds from now, rounded up, as delay-seconds.
	ResetDelta
)

// String names the format.
func (r ResetFormat) String() string {
	switch r {
	case ResetUnix:
		return "unix"
	case ResetDelta:
		return "delta"
	}
	return fmt.Sprintf("ResetFormat(%d)", uint8(r))
}

// TierSelection says which tiers the RateLimit field reports. The zero value
// is TiersDeciding.
type TierSelection uint8

const (
	// TiersDeciding reports one service limit item: the deciding tier of the
	// Decision (the denying tier with the longest wait, or, when allowed, the
	// tier with the least remaining). This is the limit "closest to being
	// exhausted" that the draft (appendix B.1.2) lets a server report alone.
	// The default.
	TiersDeciding TierSelection = iota
	// TiersAll reports one item per tier that applied, in policy order.
	TiersAll
)

// String names the selection.
func (s TierSelection) String() string {
	switch s {
	case TiersDeciding:
		return "deciding"
	case TiersAll:
		return "all"
	}
	return fmt.Sprintf("TierSelection(%d)", uint8(s))
}

// NameCase says how header names are spelled. HTTP field names are
// case-insensitive (RFC 9110 section 5.1); the choice only saves adapters
// from rewriting the names. The zero value is NamesAsSpecified.
type NameCase uint8

const (
	// NamesAsSpecified spells names as their specifications do:
	// X-RateLimit-Limit, RateLimit-Policy, RateLimit. The default.
	NamesAsSpecified NameCase = iota
	// NamesCanonical spells names as net/textproto.CanonicalMIMEHeaderKey
	// does (X-Ratelimit-Limit, Ratelimit-Policy), so that a net/http adapter
	// can store them in an http.Header map without canonicalizing, which
	// would allocate a new name for every header of every response.
	NamesCanonical
	// NamesLower spells names in lower case, as HTTP/2 and gRPC metadata
	// require.
	NamesLower
)

// String names the case.
func (c NameCase) String() string {
	switch c {
	case NamesAsSpecified:
		return "as_specified"
	case NamesCanonical:
		return "canonical"
	case NamesLower:
		return "lower"
	}
	return fmt.Sprintf("NameCase(%d)", uint8(c))
}

// HeaderOption configures a HeaderFormat; pass options to NewHeaderFormat.
// Options are applied in order, so a later one replaces an earlier one of the
// same kind. A nil HeaderOption is an error.
type HeaderOption interface{ applyHeader(*headerConfig) }

type headerConfig struct {
	xRateLimit   bool
	reset        ResetFormat
	policy       bool
	rateLimit    bool
	tiers        TierSelection
	retryAfter   bool
	cacheControl bool
	names        NameCase
	shadow       bool
	errs         []error // what the options got wrong, in order
}

// fail records an error wrapping ErrInvalidOption; NewHeaderFormat returns
// them.
func (c *headerConfig) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

type headerOptionFunc func(*headerConfig)

func (f headerOptionFunc) applyHeader(c *headerConfig) { f(c) }

// WithXRateLimit turns the X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset fields on or off. The default is on.
func WithXRateLimit(on bool) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.xRateLimit = on })
}

// WithResetFormat sets how X-RateLimit-Reset is expressed. The default is
// ResetUnix.
func WithResetFormat(f ResetFormat) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.reset = f })
}

// WithRateLimitPolicy turns the RateLimit-Policy field of the draft on or
// off. The default is on.
func WithRateLimitPolicy(on bool) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.policy = on })
}

// WithRateLimit turns the RateLimit field of the draft on or off. The
// default is on.
func WithRateLimit(on bool) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.rateLimit = on })
}

// WithRateLimitTiers sets which tiers the RateLimit field reports. The
// default is TiersDeciding.
func WithRateLimitTiers(s TierSelection) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.tiers = s })
}

// WithRetryAfter turns Retry-After on denials on or off. The default is on.
func WithRetryAfter(on bool) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.retryAfter = on })
}

// WithCacheControl turns "Cache-Control: no-store" on denials on or off, so
// that no cache serves a 429 or 503 to a later request. The default is on.
func WithCacheControl(on bool) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.cacheControl = on })
}

// WithShadowTiers makes the fields report tiers in shadow mode (see
// WithShadow) like the others when on; the fields of the deciding tier
// (X-RateLimit-*, Retry-After) still describe an enforced one, if any (see
// Decision). The default, off, leaves them out: a client is told only of
// the limits that are enforced, and of none when every tier is in shadow
// mode.
func WithShadowTiers(on bool) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.shadow = on })
}

// WithNameCase sets how header names are spelled. The default is
// NamesAsSpecified.
func WithNameCase(n NameCase) HeaderOption {
	return headerOptionFunc(func(c *headerConfig) { c.names = n })
}

// HeaderField is one of the header fields a HeaderFormat writes, in the
// order Headers sets them. Adapters use it to look up the name of a field
// (HeaderField.Name) once, at construction, in their framework's spelling.
type HeaderField uint8

// The fields, in the order HeaderFormat.Headers sets them.
const (
	FieldLimit        HeaderField = iota // X-RateLimit-Limit
	FieldRemaining                       // X-RateLimit-Remaining
	FieldReset                           // X-RateLimit-Reset
	FieldPolicy                          // RateLimit-Policy
	FieldRateLimit                       // RateLimit
	FieldRetryAfter                      // Retry-After
	FieldCacheControl                    // Cache-Control
	// NumHeaderFields is the number of fields: a HeaderField is below it.
	NumHeaderFields = 7
)

const numHeaders = NumHeaderFields

var headerNames = [numHeaders]string{
	FieldLimit:        "X-RateLimit-Limit",
	FieldRemaining:    "X-RateLimit-Remaining",
	FieldReset:        "X-RateLimit-Reset",
	FieldPolicy:       "RateLimit-Policy",
	FieldRateLimit:    "RateLimit",
	FieldRetryAfter:   "Retry-After",
	FieldCacheControl: "Cache-Control",
}

// String returns the field's name as its specification spells it
// ("X-RateLimit-Limit"), or "HeaderField(n)" for an unknown one.
func (h HeaderField) String() string {
	if h < numHeaders {
		return headerNames[h]
	}
	return fmt.Sprintf("HeaderField(%d)", uint8(h))
}

// HeaderFormat writes the rate-limit header fields and problem bodies of
// decisions. Build one with NewHeaderFormat, once, at configuration time. A
// HeaderFormat is immutable and safe for concurrent use.
//
// The zero value, like a nil *HeaderFormat, has every field off: Headers
// sets nothing, while Status and AppendProblem, which no option changes,
// work as for any HeaderFormat. None of its methods panics.
//
// # Fields
//
// On every response of a request that at least one rule applied to:
//
//	X-RateLimit-Limit      the deciding tier's Limit (burst, or window limit)
//	X-RateLimit-Remaining  the deciding tier's Remaining (whole tokens)
//	X-RateLimit-Reset      when the deciding tier is full again: Unix epoch
//	                       seconds rounded up (ResetUnix), or seconds from now
//	                       rounded up (ResetDelta)
//	RateLimit-Policy       one quota policy item per tier, in policy order
//	RateLimit              the deciding tier's service limit item (TiersDeciding)
//	                       or one item per tier (TiersAll)
//
// On a denial, in addition:
//
//	Retry-After            whole seconds, RetryAfter rounded up, at least 1
//	                       (RFC 9110 section 10.2.3); not sent for
//	                       ReasonCostExceedsLimit, which no wait can cure
//	Cache-Control          no-store
//
// A request no rule applied to (Limit 0, no tiers) gets no rate-limit fields
// at all: there is no quota to describe, and inventing one would mislead
// clients. A FailOpen decision after a store failure has no tiers either and
// gets nothing. A FailClosed decision (ReasonUnavailable) gets Retry-After and
// Cache-Control only, and a 503 body.
//
// # The draft's fields for a token bucket
//
// RateLimit-Policy (draft section 3) is a List of Items; each Item is the
// rule's name as a String with the parameters q, the quota (section 3.1.1),
// and w, the window in whole seconds (section 3.1.3). RateLimit (section 4)
// is a List of Items naming a policy, with r, the available quota (section
// 4.1.1), and t, the effective window in seconds (section 4.1.2).
//
// A token bucket of rate R per second and burst B maps onto them as
//
//	q = B                          the most one burst can take
//	w = ceil(B / R)                seconds to refill from empty, so that q/w
//	                               is the sustained rate (never above R, as w
//	                               rounds up)
//	r = Remaining                  whole tokens left after this request
//	t = ceil(ResetAfter)           allowed: seconds until the bucket is full
//	t = max(1, ceil(RetryAfter))   denied: seconds until the cost can pass,
//	                               the same value as Retry-After (a cost
//	                               above B, which no wait cures, gets
//	                               ceil(ResetAfter) as when allowed)
//
// For example TokenBucket(PerSecond(10), 50) has q = 50 and w = 50/10 = 5;
// its first request (49 tokens left, full again in 100ms) gets
//
//	RateLimit-Policy: "api";q=50;w=5
//	RateLimit: "api";r=49;t=1
//
// and after 50 requests in the same instant, the 51st is denied:
//
//	RateLimit: "api";r=0;t=1
//	Retry-After: 1
//
// For the window algorithms q is the limit per window and w the window in
// seconds, rounded up; r and t follow the same rules. A shaping limit is
// reported as the token bucket it is. Integers are capped at 15 digits
// (RFC 9651 section 3.3.1), so a quota or remaining count above
// 999,999,999,999,999 is understated, never overstated. The optional qu
// (quota unit) parameter is not sent, so clients read the default,
// "requests"; the optional pk (partition key) is not sent, since the
// identities behind a bucket (user ids, addresses) are not for clients to see
// (draft section 6.1) and a Decision does not carry them.
//
// With TiersDeciding, RateLimit reports one tier, the one closest to
// exhaustion or the one that denied, as the draft allows (appendix B.1.2);
// RateLimit-Policy still lists every tier, so a client knows all the quotas.
// With TiersAll, a denied response caps every t at the Retry-After value: a
// Retry-After should not point earlier than the end of an effective window
// (draft section 6), and a client obeys Retry-After first anyway (section 7).
//
// # Bodies
//
// A denied request gets an RFC 9457 body (AppendProblem): the draft's
// quota-exceeded type (section 5.1) with status 429 and violated-policies
// listing every tier that denied; a FailClosed store failure gets a short
// about:blank body with status 503.
type HeaderFormat struct {
	names  [numHeaders]string
	on     [numHeaders]bool
	reset  ResetFormat
	tiers  TierSelection
	shadow bool // report shadow tiers
	// texts memoizes the constant values (RateLimit-Policy and
	// X-RateLimit-Limit) per set of rules; nil in the zero value, which
	// formats them every time.
	texts *textCache
}

// NewHeaderFormat returns a HeaderFormat with opts applied in order over the
// defaults (every field on, ResetUnix, TiersDeciding, NamesAsSpecified). It
// fails with an error wrapping ErrInvalidOption, naming the option at fault,
// for a nil option (named by its position in opts, counted from 0) or an
// unknown ResetFormat, TierSelection or NameCase; every mistake found is
// reported, joined with errors.Join.
func NewHeaderFormat(opts ...HeaderOption) (*HeaderFormat, error) {
	cfg := headerConfig{
		xRateLimit:   true,
		policy:       true,
		rateLimit:    true,
		retryAfter:   true,
		cacheControl: true,
	}
	for i, o := range opts {
		if o == nil {
			cfg.fail("NewHeaderFormat: option %d is nil", i)
			continue
		}
		o.applyHeader(&cfg)
	}
	if cfg.reset > ResetDelta {
		cfg.fail("WithResetFormat: want ResetUnix or ResetDelta, got %v", cfg.reset)
	}
	if cfg.tiers > TiersAll {
		cfg.fail("WithRateLimitTiers: want TiersDeciding or TiersAll, got %v", cfg.tiers)
	}
	if cfg.names > NamesLower {
		cfg.fail("WithNameCase: want NamesAsSpecified, NamesCanonical or NamesLower, got %v", cfg.names)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	f := &HeaderFormat{reset: cfg.reset, tiers: cfg.tiers, shadow: cfg.shadow, texts: new(textCache)}
	for i, n := range headerNames {
		switch cfg.names {
		case NamesCanonical:
			n = canonicalName(n)
		case NamesLower:
			n = lowerName(n)
		}
		f.names[i] = n
	}
	f.on[FieldLimit] = cfg.xRateLimit
	f.on[FieldRemaining] = cfg.xRateLimit
	f.on[FieldReset] = cfg.xRateLimit
	f.on[FieldPolicy] = cfg.policy
	f.on[FieldRateLimit] = cfg.rateLimit
	f.on[FieldRetryAfter] = cfg.retryAfter
	f.on[FieldCacheControl] = cfg.cacheControl
	return f, nil
}

// canonicalName is textproto.CanonicalMIMEHeaderKey for the ASCII names above.
func canonicalName(s string) string {
	b := []byte(s)
	upper := true
	for i, c := range b {
		switch {
		case upper && 'a' <= c && c <= 'z':
			b[i] = c - 'a' + 'A'
		case !upper && 'A' <= c && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
		upper = c == '-'
	}
	return string(b)
}

func lowerName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// Name returns the field's name as f spells it (see WithNameCase), and ""
// for a nil f or an unknown field. Adapters look names up once, at
// construction, and keep them in their framework's own form.
func (h HeaderField) Name(f *HeaderFormat) string {
	if f == nil || h >= numHeaders {
		return ""
	}
	return f.names[h]
}

// Headers calls set(name, value) for every header field of d, in a fixed
// order: X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
// RateLimit-Policy, RateLimit, Retry-After, Cache-Control, skipping those
// that are off or do not apply (see HeaderFormat). X-RateLimit-Reset in
// ResetUnix form counts from d.At, the time the store decided at, so every
// instance behind a shared store reports the same instant.
//
// Every name is set at most once, so set may replace (http.Header.Set) or
// add. The values that stay the same from request to request
// (X-RateLimit-Limit, RateLimit-Policy, Cache-Control) are strings f keeps;
// the others are slices of one string, Headers' only allocation, which it
// does not make when d has none of them. The strings stay valid forever.
// set is not retained. RateLimit-Policy and RateLimit must not be sent as
// trailers (draft sections 3.1 and 4.1). A zero or nil f sets nothing.
// HeaderValues.Format does the same work without the allocation, for
// adapters whose framework copies the bytes.
func (f *HeaderFormat) Headers(d *Decision, set func(name, value string)) {
	if f == nil {
		return
	}
	var arr [maxInlineTiers]TierState
	f.headers(d, f.shown(d, arr[:0]), d.At, set)
}

// Format formats the header fields of d into v, replacing what v held:
// the fields f.Headers would set, in the same order, with the same values.
// It allocates nothing once f has seen d's rules (their constant values are
// formatted once and kept, per set of rules, for as long as f is
// reachable), unless the values overflow v's inline buffer (many tiers with
// long names under TiersAll), when the overflowing ones are copied to the
// heap. A nil or zero f leaves v empty.
func (v *HeaderValues) Format(f *HeaderFormat, d *Decision) {
	v.n, v.used, v.consts = 0, 0, 0
	if f == nil || f.valuesOne(d, v) {
		return
	}
	if d.NumTiers() <= 2 {
		// The common case, in a quarter of the room to zero.
		var arr [2]TierState
		f.values(d, f.shown(d, arr[:0]), d.At, v)
		return
	}
	var arr [maxInlineTiers]TierState
	f.values(d, f.shown(d, arr[:0]), d.At, v)
}

// shown appends to buf the tiers of d the fields report: all of them (f nil
// or showing shadow tiers), or those not in shadow mode.
func (f *HeaderFormat) shown(d *Decision, buf []TierState) []TierState {
	for i := range d.NumTiers() {
		buf = append(buf, TierState{})
		t := &buf[len(buf)-1]
		if d.tierInto(i, t); f != nil && !f.shadow && t.Shadow {
			buf = buf[:len(buf)-1]
		}
	}
	return buf
}

// headers is Headers with the tiers passed apart from d, so that tests can
// format tiers no policy would accept (names needing escapes).
func (f *HeaderFormat) headers(d *Decision, tiers []TierState, now time.Time, set func(name, value string)) {
	var v HeaderValues
	f.values(d, tiers, now, &v)
	if v.n == 0 {
		return
	}
	// One string holds every value that is not constant.
	s := string(v.buf[:v.used])
	for i := range v.n {
		val := s[v.start[i]:v.end[i]]
		if c := v.cst[i]; c != nil {
			val = c.s
		}
		set(f.names[v.field[i]], val)
	}
}

// headerValuesBuf is how many bytes of values a HeaderValues holds inline:
// those of one or two tiers with the longest names, more with shorter ones.
const headerValuesBuf = 256

// HeaderValues holds the header fields of one decision, as its Format
// method formats them: at most NumHeaderFields, in the order
// HeaderFormat.Headers sets them. It keeps the bytes of the values that
// change from request to request inline, so a HeaderValues declared as a
// local variable costs no allocation; the others are strings the
// HeaderFormat keeps. The zero value holds no fields. A HeaderValues is not
// safe for concurrent use; its methods panic for i outside [0, Len()).
type HeaderValues struct {
	n     int
	field [numHeaders]HeaderField
	// A value is either one that lasts, cst (a constant of the format, or
	// one that overflowed buf), or buf[start:end]. The values in buf are
	// contiguous, in field order: buf[:used].
	cst        [numHeaders]*constValue
	start, end [numHeaders]uint16
	used       int
	consts     int // how many values are in cst
	buf        [headerValuesBuf]byte
}

// constValue is a header value that stays valid forever, in the forms
// adapters take it: a string, its bytes, and a one-element slice for header
// maps (http.Header). None of them may be modified.
type constValue struct {
	s  string
	b  []byte
	ss []string
}

func newConstValue(b []byte) *constValue {
	s := string(b)
	return &constValue{s: s, b: []byte(s), ss: []string{s}}
}

// Len returns the number of fields v holds.
func (v *HeaderValues) Len() int { return v.n }

// Field returns which field the i-th is; HeaderField.Name spells it.
func (v *HeaderValues) Field(i int) HeaderField {
	// Indexing the fields held, v's first Len(), panics for any other i
	// and keeps Field, Bytes and Constant small enough to be inlined.
	return v.field[:v.n][i]
}

// Bytes returns the i-th value. The slice aliases v, or a constant the
// HeaderFormat keeps: it is valid until v is formatted again, and must not
// be modified. Adapters whose framework copies header values (fasthttp)
// pass it on as it is.
func (v *HeaderValues) Bytes(i int) []byte {
	if c := v.cst[:v.n][i]; c != nil {
		return c.b
	}
	return v.buf[v.start[i]:v.end[i]]
}

// Constant returns the i-th value and true when it is a string that stays
// valid forever (the limit, the policy, "no-store"), which an adapter may
// keep without copying; "" and false for a value that lives in v.
func (v *HeaderValues) Constant(i int) (string, bool) {
	if c := v.cst[:v.n][i]; c != nil {
		return c.s, true
	}
	return "", false
}

// spare returns the unused part of v's buffer, for the next value to be
// appended to; commit records what was appended.
func (v *HeaderValues) spare() []byte { return v.buf[v.used:v.used:len(v.buf)] }

// commit records b, the next value appended to spare(), as field h. When b
// outgrew the buffer, append moved it to the heap: it is kept as a
// constValue.
func (v *HeaderValues) commit(h HeaderField, b []byte) {
	i := v.n
	v.n++
	v.field[i] = h
	start := v.used
	if len(b) > 0 && (start == len(v.buf) || &b[0] != &v.buf[start]) {
		// Copies, not b itself, which the compiler cannot tell from a
		// slice of v.buf: keeping it would move every HeaderValues to the
		// heap.
		v.cst[i] = newConstValue(b)
		v.consts++
		v.start[i], v.end[i] = uint16(start), uint16(start)
		return
	}
	v.cst[i] = nil
	v.used = start + len(b)
	v.start[i], v.end[i] = uint16(start), uint16(v.used)
}

// last returns the bytes of the value committed last.
func (v *HeaderValues) last() []byte {
	i := v.n - 1
	if c := v.cst[i]; c != nil {
		return c.b
	}
	return v.buf[v.start[i]:v.end[i]]
}

// constant records field h with the constant value c.
func (v *HeaderValues) constant(h HeaderField, c *constValue) {
	i := v.n
	v.n++
	v.field[i] = h
	v.cst[i] = c
	v.consts++
	v.start[i], v.end[i] = uint16(v.used), uint16(v.used)
}

// SetHeader stores v's fields in h, a header map such as http.Header, each
// under names[field], replacing what h held there; with canonical names
// (NamesCanonical, or textproto.CanonicalMIMEHeaderKey's), h is an
// http.Header as Set would leave it, without a canonicalization per field.
// The constant values (X-RateLimit-Limit, RateLimit-Policy, Cache-Control)
// are one-element slices shared by every response, as precomputed header
// values are in other middleware: like any value in an http.Header, they
// must not be modified in place (Set and Add replace them, which is fine).
// The others share one allocation (two when they are many or long): their
// bytes, and the slices of their entries, each capped at length 1 so that
// appending to one cannot clobber the next.
func (v *HeaderValues) SetHeader(h map[string][]string, names *[NumHeaderFields]string) {
	dyn := v.n - v.consts
	var (
		all     string
		backing []string
	)
	switch {
	case dyn == 0:
	case dyn <= len(headerBlock{}.ss) && v.used <= len(headerBlock{}.b):
		blk := new(headerBlock)
		copy(blk.b[:], v.buf[:v.used])
		all = unsafe.String(&blk.b[0], v.used) // blk.b is not written again
		backing = blk.ss[:dyn]
	default:
		all = string(v.buf[:v.used])
		backing = make([]string, dyn)
	}
	j := 0
	for i := range v.n {
		if c := v.cst[i]; c != nil {
			h[names[v.field[i]]] = c.ss
			continue
		}
		backing[j] = all[v.start[i]:v.end[i]]
		h[names[v.field[i]]] = backing[j : j+1 : j+1]
		j++
	}
}

// headerBlock holds the values of one response that change from one to
// the next, and the slices of them, for SetHeader, in one allocation: up to
// four values in 80 bytes: the remaining count, the reset and the
// RateLimit item of one tier with a short name (and Retry-After on a
// denial), as TestSetHTTPHeaders' allocation count checks for a tier
// "per-ip" with 2^40 tokens; longer values take SetHeader's two.
type headerBlock struct {
	ss [4]string
	b  [80]byte
}

// noStore is Cache-Control's value on denials.
var noStore = newConstValue([]byte("no-store"))

// values formats the fields of d, reporting tiers, into v, which is empty.
func (f *HeaderFormat) values(d *Decision, tiers []TierState, now time.Time, v *HeaderValues) {
	deciding := decidingTier(d, tiers)
	retry := int64(-1) // Retry-After seconds, -1 when not sent
	if !d.Allowed && d.Reason != ReasonCostExceedsLimit {
		retry = retrySeconds(d.RetryAfter)
	}
	if deciding < 0 && retry < 0 {
		return // no rule applied: nothing to say
	}
	if deciding >= 0 {
		var text *ruleText
		if f.on[FieldLimit] || f.on[FieldPolicy] || f.on[FieldRateLimit] {
			text = f.texts.get(tiers)
		}
		// remaining holds X-RateLimit-Remaining's digits, which RateLimit's
		// r repeats for the deciding tier.
		var remaining []byte
		if f.on[FieldLimit] {
			var limit *constValue
			if text != nil {
				limit = &text.limit[deciding]
			}
			t := &tiers[deciding]
			remaining = f.xRateLimit(v, d, now, limit, t.limit().Burst(), t.Remaining)
		}
		if f.on[FieldPolicy] {
			if text != nil {
				v.constant(FieldPolicy, &text.policy)
			} else {
				v.commit(FieldPolicy, appendPolicy(v.spare(), tiers))
			}
		}
		if f.on[FieldRateLimit] {
			if f.tiers == TiersAll {
				b := v.spare()
				for i := range tiers {
					if i > 0 {
						b = append(b, ", "...)
					}
					b = appendServiceItem(b, text, i, &tiers[i], retry, nil)
				}
				v.commit(FieldRateLimit, b)
			} else {
				v.commit(FieldRateLimit, appendServiceItem(v.spare(), text, deciding, &tiers[deciding], retry, remaining))
			}
		}
	}
	if retry >= 0 && f.on[FieldRetryAfter] {
		v.commit(FieldRetryAfter, appendDecimal(v.spare(), retry))
	}
	if !d.Allowed && f.on[FieldCacheControl] {
		v.constant(FieldCacheControl, noStore)
	}
}

// xRateLimit commits d's X-RateLimit-Limit, -Remaining and -Reset (from
// now) to v, d's deciding tier being of burst and holding tierRemaining;
// limit, when not nil, is the constant value of that burst. It returns
// X-RateLimit-Remaining's digits when RateLimit's r may repeat them: d's
// Remaining is the tier's, below the Structured Field cap.
func (f *HeaderFormat) xRateLimit(v *HeaderValues, d *Decision, now time.Time, limit *constValue, burst, tierRemaining int64) (remaining []byte) {
	if limit != nil && d.Limit == burst {
		v.constant(FieldLimit, limit)
	} else {
		v.commit(FieldLimit, appendDecimal(v.spare(), d.Limit))
	}
	v.commit(FieldRemaining, appendDecimal(v.spare(), d.Remaining))
	if d.Remaining == sfInt(d.Remaining) && d.Remaining == tierRemaining {
		remaining = v.last()
	}
	if f.reset == ResetDelta {
		v.commit(FieldReset, appendDecimal(v.spare(), ceilSeconds(d.ResetAfter)))
	} else {
		v.commit(FieldReset, appendDecimal(v.spare(), ceilUnixAfter(now, d.ResetAfter)))
	}
	return remaining
}

// valuesOne is values for the commonest decision, allowed on a single
// tier of its rule's own limit, not in shadow mode, whose constant values
// f keeps already: the same fields, without making the tier's TierState
// and looking the deciding tier and the constant values up in general,
// formatted in place (they fit in v's buffer). It reports false, having
// written nothing, for any other decision, which values formats.
// TestValuesOneSameAsValues compares the two.
func (f *HeaderFormat) valuesOne(d *Decision, v *HeaderValues) bool {
	text := f.one(d)
	limit, rl := f.on[FieldLimit], f.on[FieldRateLimit]
	if text == nil || (limit && d.Limit != d.tiers[0].rule.Limit.burst) || len(text.item[0]) > maxOneItem {
		return false
	}
	b, rem, reset := f.appendOne(v.buf[:0], d, text, limit, rl)
	n, consts := 0, 0
	if limit {
		v.field[0], v.cst[0], v.start[0], v.end[0] = FieldLimit, &text.limit[0], 0, 0
		v.field[1], v.cst[1], v.start[1], v.end[1] = FieldRemaining, nil, 0, uint16(rem)
		v.field[2], v.cst[2], v.start[2], v.end[2] = FieldReset, nil, uint16(rem), uint16(reset)
		n, consts = 3, 1
	}
	if f.on[FieldPolicy] {
		v.field[n], v.cst[n], v.start[n], v.end[n] = FieldPolicy, &text.policy, uint16(reset), uint16(reset)
		n, consts = n+1, consts+1
	}
	if rl {
		v.field[n], v.cst[n], v.start[n], v.end[n] = FieldRateLimit, nil, uint16(reset), uint16(len(b))
		n++
	}
	v.n, v.used, v.consts = n, len(b), consts
	return true
}

// maxOneItem bounds the start of the RateLimit item (the rule's name,
// quoted, and ";r=") that valuesOne formats in place: with the three
// integers around it (at most 20 bytes each) and ";t=", every value fits
// in a HeaderValues' buffer. A rule's name has at most 64 characters, so
// every item's start is within it; valuesOne checks it all the same,
// leaving a longer one to values.
const maxOneItem = headerValuesBuf - 4*20 - len(";t=")

// appendOne appends to b, for valuesOne and setOne, the values of d's one
// tier that change from one response to the next, in values' order:
// X-RateLimit-Remaining and -Reset (with limit) and the RateLimit item
// (with rl); it returns b and where the first two end in it.
func (f *HeaderFormat) appendOne(b []byte, d *Decision, text *ruleText, limit, rl bool) (_ []byte, rem, reset int) {
	t := &d.tiers[0]
	var remaining []byte // as in values
	if limit {
		b = appendDecimal(b, d.Remaining)
		rem = len(b)
		if d.Remaining == sfInt(d.Remaining) && d.Remaining == t.remaining {
			remaining = b[:rem:rem]
		}
		if f.reset == ResetDelta {
			b = appendDecimal(b, ceilSeconds(d.ResetAfter))
		} else {
			b = appendDecimal(b, ceilUnixAfter(d.At, d.ResetAfter))
		}
	}
	reset = len(b)
	if rl {
		// appendServiceItem's item for an allowed tier and no Retry-After.
		b = append(b, text.item[0]...)
		b = appendItemRest(b, remaining, t.remaining, ceilSeconds(time.Duration(t.resetAfter)))
	}
	return b, rem, reset
}

// one returns the constant values of d's rule when d is the decision
// valuesOne and setOne cover: allowed on a single tier of its rule's own
// limit, not in shadow mode, whose constant values f keeps already (the
// last ones it found); nil for any other.
func (f *HeaderFormat) one(d *Decision) *ruleText {
	if d.n != 1 || d.more != nil || !d.Allowed || d.Limit == 0 || f.texts == nil {
		return nil
	}
	t, fl := &d.tiers[0], d.flags[0]
	r := t.rule
	if fl != 1 || r == nil || (t.limit != nil && t.limit != &r.Limit) || r.Name != d.Rule {
		return nil // not allowed with ReasonNone, in shadow mode, or a Lookup's limit
	}
	e := f.texts.last.Load()
	if e == nil || !e.key.same(&textKey{r}) {
		return nil // values finds or makes them
	}
	return e.text
}

// SetHeader stores the header fields f formats for d in h, a header map
// such as http.Header, each under names[field], replacing what h held
// there: what HeaderValues.Format then HeaderValues.SetHeader store, with
// the same sharing of constant values and the same single allocation for
// the others, with no HeaderValues between them for the commonest decision
// (allowed on one tier). A nil f stores nothing.
func (f *HeaderFormat) SetHeader(h map[string][]string, names *[NumHeaderFields]string, d *Decision) {
	if f == nil || f.setOne(h, names, d) {
		return
	}
	var v HeaderValues
	v.Format(f, d)
	v.SetHeader(h, names)
}

// setOne is SetHeader for the decisions valuesOne covers: it formats the
// values that change straight into the allocation the header map keeps,
// in the order values formats them. It reports false, having stored
// nothing, for any other decision. TestValuesOneSameAsValues compares
// what it stores with what HeaderValues.SetHeader does.
func (f *HeaderFormat) setOne(h map[string][]string, names *[NumHeaderFields]string, d *Decision) bool {
	text := f.one(d)
	limit, rl := f.on[FieldLimit], f.on[FieldRateLimit]
	if text == nil || (limit && d.Limit != d.tiers[0].rule.Limit.burst) {
		return false // X-RateLimit-Limit is not the rule's constant
	}
	if f.on[FieldPolicy] {
		h[names[FieldPolicy]] = text.policy.ss
	}
	if !limit && !rl {
		return true
	}
	// In blk.b while they fit (append moves them to the heap otherwise,
	// which is as good: nothing writes to them once made strings).
	blk := new(headerBlock)
	b, rem, reset := f.appendOne(blk.b[:0], d, text, limit, rl)
	all := unsafe.String(unsafe.SliceData(b), len(b)) // b is not written again
	if limit {
		h[names[FieldLimit]] = text.limit[0].ss
		blk.ss[0], blk.ss[1] = all[:rem], all[rem:reset]
		h[names[FieldRemaining]] = blk.ss[0:1:1]
		h[names[FieldReset]] = blk.ss[1:2:2]
	}
	if rl {
		blk.ss[2] = all[reset:]
		h[names[FieldRateLimit]] = blk.ss[2:3:3]
	}
	return true
}

// appendPolicy appends RateLimit-Policy's value: one quota policy item per
// tier, in order.
func appendPolicy(b []byte, tiers []TierState) []byte {
	for i := range tiers {
		if i > 0 {
			b = append(b, ", "...) // RFC 9651 section 4.1.1
		}
		b = appendPolicyItem(b, &tiers[i])
	}
	return b
}

// ruleText holds the values that depend only on the rules (and their
// limits) a response reports: RateLimit-Policy, X-RateLimit-Limit for each
// tier deciding, and the start of each tier's RateLimit item.
type ruleText struct {
	policy constValue
	limit  [inlineTiers]constValue
	item   [inlineTiers][]byte // "name";r=
}

// textKey identifies the tiers a response reports: their rules, in order.
type textKey [inlineTiers]*Rule

// same reports whether k and o are equal, comparing the pointers one by
// one, which costs less than the call to compare their memory that k == o
// makes.
func (k *textKey) same(o *textKey) bool {
	return k[0] == o[0] && k[1] == o[1] && k[2] == o[2] && k[3] == o[3]
}

// same compares four pointers: this does not compile for another
// inlineTiers.
const _ = uint(inlineTiers-4) + uint(4-inlineTiers)

// maxTexts bounds a textCache: a policy replaced at run time (SetPolicy)
// brings new rules, and the cache starts afresh rather than keep the old
// ones forever.
const maxTexts = 256

// textCache maps the tiers a response reports to their constant values.
// The map is replaced whole on insertion (copy on write), so lookups take
// no lock. The values depend on the rules alone, which a Policy never
// changes, so an entry never goes stale. Its entries are made once, on
// insertion, and last points to one of them: responses that alternate
// between rule sets (a tier that applies to some requests only) find
// theirs in the map without allocating.
type textCache struct {
	mu   sync.Mutex
	m    atomic.Pointer[map[textKey]*textEntry]
	last atomic.Pointer[textEntry] // the entry found last, checked first
}

type textEntry struct {
	key  textKey
	text *ruleText
}

// get returns the constant values of tiers, or nil when they cannot be
// kept: more tiers than a key holds, or a tier whose limit is not its
// rule's own (a Lookup's, which may differ per identity).
func (c *textCache) get(tiers []TierState) *ruleText {
	if c == nil || len(tiers) > inlineTiers {
		return nil
	}
	var k textKey
	for i := range tiers {
		t := &tiers[i]
		if t.Rule == nil || (t.Limit != nil && t.Limit != &t.Rule.Limit) {
			return nil
		}
		k[i] = t.Rule
	}
	// Most services have one policy and few rule sets: the last one found
	// is usually the one, and comparing four pointers is cheaper than
	// hashing them.
	if e := c.last.Load(); e != nil && e.key.same(&k) {
		return e.text
	}
	if m := c.m.Load(); m != nil {
		if e, ok := (*m)[k]; ok {
			c.last.Store(e)
			return e.text
		}
	}
	e := &textEntry{key: k, text: newRuleText(tiers)}
	defer c.last.Store(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 1
	if old != nil && len(*old) < maxTexts {
		n += len(*old)
	}
	m := make(map[textKey]*textEntry, n)
	if old != nil && len(*old) < maxTexts {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[k] = e
	c.m.Store(&m)
	return e.text
}

func newRuleText(tiers []TierState) *ruleText {
	t := &ruleText{policy: *newConstValue(appendPolicy(nil, tiers))}
	for i := range tiers {
		t.limit[i] = *newConstValue(appendDecimal(nil, tiers[i].limit().Burst()))
		t.item[i] = appendItemStart(nil, tiers[i].Rule.Name)
	}
	return t
}

// decidingTier returns the index of d's deciding tier in tiers, or -1 when no
// rule applied or tiers leaves it out: a shadow tier, which decides only
// when every tier is in shadow mode, in a format that hides them.
func decidingTier(d *Decision, tiers []TierState) int {
	if d.Limit == 0 {
		return -1
	}
	for i := range tiers {
		if tiers[i].Rule != nil && tiers[i].Rule.Name == d.Rule {
			return i
		}
	}
	return -1
}

// Status returns the HTTP status code of the response to a denied decision:
// 503 for ReasonUnavailable (the store failed and the limiter fails closed),
// 429 for any other denial, and 0 when d is allowed, meaning the request goes
// on to its handler.
func (f *HeaderFormat) Status(d *Decision) int {
	switch {
	case d.Allowed:
		return 0
	case d.Reason == ReasonUnavailable:
		return statusServiceUnavailable
	}
	return statusTooManyRequests
}

// AppendProblem appends to dst the application/problem+json body (RFC 9457)
// of the response to d, and returns the extended buffer. For a denial it is
// the draft's quota-exceeded type with status 429, a detail naming the
// deciding tier and the wait, and violated-policies listing every tier that
// denied, in policy order (draft section 5.1). For ReasonUnavailable it is a
// short about:blank body with status 503. For an allowed d it appends
// nothing. It allocates only when dst lacks capacity; names are escaped as
// JSON requires.
func (f *HeaderFormat) AppendProblem(dst []byte, d *Decision) []byte {
	var arr [maxInlineTiers]TierState
	return appendProblem(dst, d, f.shown(d, arr[:0]))
}

func appendProblem(dst []byte, d *Decision, tiers []TierState) []byte {
	switch {
	case d.Allowed:
		return dst
	case d.Reason == ReasonUnavailable:
		dst = append(dst, `{"type":"about:blank","title":"Service Unavailable","status":503,`+
			`"detail":"Rate limiting is temporarily unavailable; retry after `...)
		dst = appendSeconds(dst, retrySeconds(d.RetryAfter))
		return append(dst, `."}`...)
	}
	dst = append(dst, `{"type":"`+ProblemTypeQuotaExceeded+`","title":"Quota Exceeded","status":429,"detail":`...)
	dst = appendDetail(dst, d)
	dst = append(dst, `,"violated-policies":[`...)
	n := 0
	for i := range tiers {
		if tiers[i].Allowed || tiers[i].Rule == nil {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, tiers[i].Rule.Name)
		n++
	}
	return append(dst, "]}"...)
}

// appendDetail appends the detail member's JSON string, for example
// "Rule \"per-user\" (scope user) denied the request: 0 of 4 left; retry
// after 1 second.".
func appendDetail(dst []byte, d *Decision) []byte {
	// The text between the quotes is ASCII without quotes or backslashes,
	// except the names, which appendJSONText escapes.
	dst = append(dst, `"Rule \"`...)
	dst = appendJSONText(dst, d.Rule)
	dst = append(dst, `\" (scope `...)
	dst = appendJSONText(dst, string(d.Scope))
	dst = append(dst, ") denied the request: "...)
	if d.Reason == ReasonCostExceedsLimit {
		dst = append(dst, "its cost is above the limit of "...)
		dst = appendDecimal(dst, d.Limit)
		return append(dst, ` and can never pass."`...)
	}
	dst = appendDecimal(dst, d.Remaining)
	dst = append(dst, " of "...)
	dst = appendDecimal(dst, d.Limit)
	dst = append(dst, " left; retry after "...)
	dst = appendSeconds(dst, retrySeconds(d.RetryAfter))
	return append(dst, `."`...)
}

func appendSeconds(dst []byte, n int64) []byte {
	dst = appendDecimal(dst, n)
	if n == 1 {
		return append(dst, " second"...)
	}
	return append(dst, " seconds"...)
}

// appendPolicyItem appends the tier's quota policy item: "name";q=B;w=W
// (draft section 3.1).
func appendPolicyItem(dst []byte, t *TierState) []byte {
	dst = appendSFString(dst, t.Rule.Name)
	dst = append(dst, ";q="...)
	dst = appendDecimal(dst, sfInt(t.limit().Burst()))
	// w must be a positive integer (draft section 3.1.3); it is optional,
	// so a limit without a window (never one a Policy holds) omits it.
	if w := ceilSeconds(t.limit().Window()); w > 0 {
		dst = append(dst, ";w="...)
		dst = appendDecimal(dst, sfInt(w))
	}
	return dst
}

// appendServiceItem appends the tier's service limit item: "name";r=R;t=T
// (draft section 4.1). retry is the response's Retry-After in seconds, or
// -1. text, when not nil, holds the item's start as tier i of its rules;
// remaining, when not nil, R's digits.
func appendServiceItem(dst []byte, text *ruleText, i int, t *TierState, retry int64, remaining []byte) []byte {
	if text != nil {
		dst = append(dst, text.item[i]...)
	} else {
		dst = appendItemStart(dst, t.Rule.Name)
	}
	var secs int64
	if t.Reason == ReasonLimited {
		secs = retrySeconds(t.RetryAfter) // as Retry-After rounds it
	} else {
		secs = ceilSeconds(t.ResetAfter)
	}
	if retry >= 0 && secs > retry {
		// Retry-After must not point before the end of the effective
		// window (draft section 6).
		secs = retry
	}
	return appendItemRest(dst, remaining, t.Remaining, secs)
}

// appendItemRest appends what follows a service limit item's start: r,
// remaining's digits or, when remaining is nil, rem's, and t, secs.
func appendItemRest(dst, remaining []byte, rem, secs int64) []byte {
	if remaining != nil {
		dst = append(dst, remaining...)
	} else {
		dst = appendDecimal(dst, sfInt(rem))
	}
	dst = append(dst, ";t="...)
	return appendDecimal(dst, sfInt(secs))
}

// appendItemStart appends a service limit item's start: "name";r=
func appendItemStart(dst []byte, name string) []byte {
	dst = appendSFString(dst, name)
	return append(dst, ";r="...)
}

// sfMaxInt is the largest Structured Field Integer (RFC 9651 section 3.3.1).
const sfMaxInt = 999_999_999_999_999

// sfInt clamps n into [0, sfMaxInt]: the draft's q, w, r and t are
// non-negative, and a quota is better understated than unserializable.
func sfInt(n int64) int64 { return min(max(n, 0), sfMaxInt) }

// appendSFString appends s as a Structured Field String (RFC 9651 section
// 4.1.6): in double quotes, with `"` and `\` escaped by a backslash. A String
// holds only printable ASCII; any other byte, which a validated rule name
// never has, is written as '?' so that the field stays well formed.
func appendSFString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c > 0x7e:
			dst = append(dst, '?')
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// appendJSONString appends s as a JSON string (RFC 8259 section 7).
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONText(dst, s)
	return append(dst, '"')
}

// appendJSONText appends the inside of a JSON string holding s: quotes,
// backslashes and control characters escaped, invalid UTF-8 replaced by
// U+FFFD, and U+2028 and U+2029 escaped so that the body is also valid
// JavaScript, as encoding/json does.
func appendJSONText(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, `\n`...)
			case c == '\r':
				dst = append(dst, `\r`...)
			case c == '\t':
				dst = append(dst, `\t`...)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, `\ufffd`...)
		case r == '\u2028':
			dst = append(dst, `\u2028`...)
		case r == '\u2029':
			dst = append(dst, `\u2029`...)
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

// ceilSeconds returns d in whole seconds rounded up, and 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// retrySeconds is Retry-After's value for a wait of d: whole seconds rounded
// up, so that a client never retries before the tokens are there, and at
// least 1, since "Retry-After: 0" invites an immediate retry (RFC 9110
// section 10.2.3 allows only whole delay-seconds).
func retrySeconds(d time.Duration) int64 { return max(ceilSeconds(d), 1) }

// ceilUnixAfter returns now.Add(d) as Unix seconds rounded up, adding d to
// now's Unix seconds and nanoseconds rather than through Time.Add, which
// also keeps the monotonic reading.
func ceilUnixAfter(now time.Time, d time.Duration) int64 {
	s := now.Unix() + int64(d/time.Second)
	ns := int64(now.Nanosecond()) + int64(d%time.Second) // -1e9 < ns < 2e9
	switch {
	case ns >= int64(time.Second):
		s, ns = s+1, ns-int64(time.Second)
	case ns < 0:
		s, ns = s-1, ns+int64(time.Second)
	}
	if ns != 0 {
		s++
	}
	return s
}
