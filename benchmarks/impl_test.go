package benchmarks

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	tollbooth "github.com/didip/tollbooth/v7"
	tblimiter "github.com/didip/tollbooth/v7/limiter"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"

	"github.com/bucketry/ratelimit/core"
)

// quota is the limit every implementation of a comparison gets: n requests
// per period, all n available at once. Token buckets read it as rate
// n/period and burst n, fixed windows as n per period.
type quota struct {
	n      int64
	period time.Duration
}

// The quotas of the scenarios. Allow scenarios must never deny within a
// run, and no bucket may be full again when its key comes back: a full
// bucket is the same as none, and our memory store reclaims it (and both
// Redis stores and redis_rate let its key expire), while most peers keep
// it; a scenario meant to measure decisions on existing buckets would then
// measure creating them for some implementations only. Real per-client
// limits are like that (100 a minute refills a token in 600ms); a short
// period with a huge burst is not. The periods are long for another reason
// too: go-limiter's memory store refills a bucket to
// min(n, ticks*period/n) tokens at each tick of period, which leaves one or
// two tokens after the first tick when n is large and period short; no
// tick falls inside a run here.
var (
	// roomy is for one hot key: 2^29 at once, more than any run decides,
	// refilled at 124 a second, less than any run decides.
	roomy = quota{n: 1 << 29, period: 50 * 24 * time.Hour}
	// manyKeys is for 10k and 100k keys visited in turn: 2^18 at once,
	// more than any run decides per key, refilled at one token in 16s,
	// longer than any key waits for its next turn.
	manyKeys = quota{n: 1 << 18, period: 50 * 24 * time.Hour}
	// stingy admits one request an hour; deny scenarios take it before the
	// timed run, so that every measured decision is a denial.
	stingy = quota{n: 1, period: time.Hour}
	// admissionQuota is the correctness test's advertised limit: 100 an
	// hour, so nothing refills while it runs.
	admissionQuota = quota{n: 100, period: time.Hour}
)

// perSecond is q's sustained rate for the libraries that take a float rate.
func (q quota) perSecond() float64 { return float64(q.n) / q.period.Seconds() }

// coreLimit is q for this project.
func (q quota) coreLimit() core.Limit {
	return core.TokenBucket(core.Rate{N: q.n, Per: q.period}, q.n)
}

// maxTiers is the most tiers a scenario checks.
const maxTiers = 8

// tierDefs are the tiers of a scenario of n tiers, its first n: our rule
// and its scope. The first three are the usual per-user, per-endpoint and
// global tiers; the others, for the eight-tier allocation check, are per-ip
// and four custom dimensions.
var tierDefs = [maxTiers]struct {
	rule  string
	scope core.Scope
}{
	{"per-user", core.ScopeUser},
	{"per-endpoint", core.ScopeEndpoint},
	{"global", core.ScopeGlobal},
	{"per-ip", core.ScopeIP},
	{"per-tenant", core.Dimension("tenant")},
	{"per-region", core.Dimension("region")},
	{"per-app", core.Dimension("app")},
	{"per-device", core.Dimension("device")},
}

// subject is one caller: the identities our limiter reads from a
// core.Request, and the same identities as one key per tier, prefixed so
// that tiers never share a key, for the peers that take a key string.
// Keys and dimensions are built once, before the timed loop.
type subject struct {
	user, endpoint, ip string
	dims               []core.Dim // tenant, region, app, device: tiers 5 to 8
	keys               []string   // one per tier, in the order of tierDefs
}

// benchEndpoint is the endpoint of every subject.
const benchEndpoint = "GET /items/{id}"

// newSubject returns the subject of user with the keys of the first tiers
// tiers (1 to maxTiers).
func newSubject(user string, tiers int) subject {
	s := subject{user: user, endpoint: benchEndpoint}
	if tiers > 3 {
		s.ip = "192.0.2.7"
	}
	if tiers > 4 {
		s.dims = []core.Dim{
			{Name: "tenant", Value: "acme"},
			{Name: "region", Value: "eu-west"},
			{Name: "app", Value: "web"},
			{Name: "device", Value: "d-" + user},
		}[:tiers-4]
	}
	all := [maxTiers]func() string{
		func() string { return "user:" + user },
		func() string { return "endpoint:" + benchEndpoint },
		func() string { return "global" },
		func() string { return "ip:" + s.ip },
		func() string { return "tenant:" + s.dims[0].Value },
		func() string { return "region:" + s.dims[1].Value },
		func() string { return "app:" + s.dims[2].Value },
		func() string { return "device:" + s.dims[3].Value },
	}
	s.keys = make([]string, tiers)
	for i := range s.keys {
		s.keys[i] = all[i]()
	}
	return s
}

// subjects returns n subjects with distinct users, with the keys of tiers
// tiers.
func subjects(n, tiers int) []subject {
	s := make([]subject, n)
	for i := range s {
		s[i] = newSubject("u"+strconv.Itoa(i), tiers)
	}
	return s
}

// impl is an implementation under comparison, built for one quota and a
// number of tiers (1: per-user; 3: per-user, per-endpoint, global). allow
// decides one request of s against every tier. It is safe for concurrent
// use.
type impl interface {
	allow(ctx context.Context, s *subject) (bool, error)
}

// statser is an impl that can tell how many of its decisions it answered
// without a round trip.
type statser interface {
	decisions() (local, total int64)
}

// builder names an in-memory implementation and builds it for a quota, a
// number of tiers and the number of keys the scenario visits (for the
// implementations whose key bound must hold them all), registering its
// cleanup with tb. oneKey marks an implementation without keys, which only
// scenarios with one subject use.
type builder struct {
	name   string
	build  func(tb testing.TB, q quota, tiers, keys int) impl
	oneKey bool
}

// coreRules returns one rule per tier, all of quota q.
func coreRules(q quota, tiers int) []core.Rule {
	rules := make([]core.Rule, tiers)
	for i := range rules {
		rules[i] = core.Rule{Name: tierDefs[i].rule, Scope: tierDefs[i].scope, Limit: q.coreLimit()}
	}
	return rules
}

// ours is this project's core.Limiter, on whatever store it was built with.
type ours struct {
	l     *core.Limiter
	tiers int
	stats func() (local, total int64) // nil for the memory store
}

func newOurs(tb testing.TB, q quota, tiers int, opts ...core.Option) *ours {
	tb.Helper()
	p, err := core.NewPolicy(coreRules(q, tiers)...)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := core.NewLimiter(p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return &ours{l: l, tiers: tiers}
}

func (o *ours) allow(ctx context.Context, s *subject) (bool, error) {
	req := core.Request{User: s.user}
	if o.tiers > 1 {
		req.Endpoint = s.endpoint
	}
	if o.tiers > 3 {
		req.IP, req.Dims = s.ip, s.dims
	}
	// Decide, the call for hot paths: the decision is written where it
	// is read, not returned by value.
	var d core.Decision
	err := o.l.Decide(ctx, &req, 1, &d)
	if err == nil && d.Err != nil {
		// The default FailOpen reports a store failure in the decision;
		// count it as an error, as a peer's error is.
		err = d.Err
	}
	return d.Allowed, err
}

func (o *ours) decisions() (local, total int64) {
	if o.stats == nil {
		return 0, 0
	}
	return o.stats()
}

// memoryBuilders are the in-memory implementations, ours first.
var memoryBuilders = []builder{
	// The store's default bound, 1,000,000 buckets, holds the 1M-key
	// scenario's keys without evicting.
	{name: "ours", build: func(tb testing.TB, q quota, tiers, _ int) impl { return newOurs(tb, q, tiers) }},
	{name: "xrate_single", build: newXrateSingle, oneKey: true},
	{name: "xrate_syncmap", build: func(tb testing.TB, q quota, tiers, _ int) impl {
		return &xrateSyncMap{limit: rate.Limit(q.perSecond()), burst: int(q.n), tiers: tiers}
	}},
	{name: "golimiter", build: newGoLimiter},
	{name: "ulule", build: func(tb testing.TB, q quota, tiers, _ int) impl {
		// The README's memory store, defaults included.
		l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: q.period, Limit: q.n})
		return &ululeImpl{l: l, tiers: tiers}
	}},
	{name: "throttled", build: newThrottledMemory},
	{name: "tollbooth", build: newTollbooth},
}

// xrateSingle is one x/time/rate Limiter per tier, keyed by nothing: the
// floor of what a token bucket costs, for scenarios with a single key.
type xrateSingle struct{ l []*rate.Limiter }

func newXrateSingle(tb testing.TB, q quota, tiers, _ int) impl {
	x := &xrateSingle{}
	for range tiers {
		x.l = append(x.l, rate.NewLimiter(rate.Limit(q.perSecond()), int(q.n)))
	}
	return x
}

func (x *xrateSingle) allow(_ context.Context, _ *subject) (bool, error) {
	for _, l := range x.l {
		if !l.Allow() {
			return false, nil
		}
	}
	return true, nil
}

// xrateSyncMap is the common keyed x/time/rate: a Limiter per key in a
// sync.Map, looked up with Load first so that a hit allocates nothing, and
// created with LoadOrStore so that concurrent first requests share one.
type xrateSyncMap struct {
	m     sync.Map // key -> *rate.Limiter
	limit rate.Limit
	burst int
	tiers int
}

func (x *xrateSyncMap) get(key string) *rate.Limiter {
	if v, ok := x.m.Load(key); ok {
		return v.(*rate.Limiter)
	}
	v, _ := x.m.LoadOrStore(key, rate.NewLimiter(x.limit, x.burst))
	return v.(*rate.Limiter)
}

func (x *xrateSyncMap) allow(_ context.Context, s *subject) (bool, error) {
	for _, k := range s.keys[:x.tiers] {
		if !x.get(k).Allow() {
			return false, nil
		}
	}
	return true, nil
}

// goLimiter is github.com/sethvargo/go-limiter's memory store, which holds
// one quota for all its keys: the tiers share it, with distinct keys.
type goLimiter struct {
	store interface {
		Take(ctx context.Context, key string) (tokens, remaining, reset uint64, ok bool, err error)
	}
	tiers int
}

func newGoLimiter(tb testing.TB, q quota, tiers, _ int) impl {
	tb.Helper()
	st, err := memorystore.New(&memorystore.Config{Tokens: uint64(q.n), Interval: q.period})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close(context.Background()) })
	return &goLimiter{store: st, tiers: tiers}
}

func (g *goLimiter) allow(ctx context.Context, s *subject) (bool, error) {
	for _, k := range s.keys[:g.tiers] {
		_, _, _, ok, err := g.store.Take(ctx, k)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// ululeImpl is github.com/ulule/limiter/v3 on any of its stores. Get counts
// the request and reports whether the window's limit is reached.
type ululeImpl struct {
	l     *ulule.Limiter
	tiers int
}

func (u *ululeImpl) allow(ctx context.Context, s *subject) (bool, error) {
	for _, k := range s.keys[:u.tiers] {
		c, err := u.l.Get(ctx, k)
		if err != nil || c.Reached {
			return false, err
		}
	}
	return true, nil
}

// throttledImpl is github.com/throttled/throttled/v2's GCRA limiter on any
// of its stores. MaxBurst counts the requests allowed beyond the first, so
// a quota of n is MaxBurst n-1.
type throttledImpl struct {
	rl    *throttled.GCRARateLimiterCtx
	tiers int
}

func throttledQuota(q quota) throttled.RateQuota {
	return throttled.RateQuota{MaxRate: throttled.PerDuration(int(q.n), q.period), MaxBurst: int(q.n) - 1}
}

func newThrottledMemory(tb testing.TB, q quota, tiers, keys int) impl {
	tb.Helper()
	// The README builds memstore.NewCtx(65536), an LRU of 65536 keys; the
	// 100k-key scenario would then evict on every request, so the bound is
	// raised to the next power of two that holds every key of the scenario
	// (2^17 for 100k, 2^20 for 1M), as every other store holds them.
	size := 65536
	for size < keys*tiers {
		size *= 2
	}
	st, err := memstore.NewCtx(size)
	if err != nil {
		tb.Fatal(err)
	}
	rl, err := throttled.NewGCRARateLimiterCtx(st, throttledQuota(q))
	if err != nil {
		tb.Fatal(err)
	}
	return &throttledImpl{rl: rl, tiers: tiers}
}

func (t *throttledImpl) allow(ctx context.Context, s *subject) (bool, error) {
	for _, k := range s.keys[:t.tiers] {
		limited, _, err := t.rl.RateLimitCtx(ctx, k, 1)
		if err != nil || limited {
			return false, err
		}
	}
	return true, nil
}

// tollboothImpl is github.com/didip/tollbooth: an x/time/rate Limiter per key
// in an expirable cache, behind one mutex. LimitReached is the call that
// LimitByKeys makes after joining its keys; calling it directly spares the
// peer the join and a second lookup for the remaining-tokens header.
type tollboothImpl struct {
	l     *tblimiter.Limiter
	tiers int
}

func newTollbooth(tb testing.TB, q quota, tiers, _ int) impl {
	l := tollbooth.NewLimiter(q.perSecond(), nil).SetBurst(int(q.n))
	return &tollboothImpl{l: l, tiers: tiers}
}

func (t *tollboothImpl) allow(_ context.Context, s *subject) (bool, error) {
	for _, k := range s.keys[:t.tiers] {
		if t.l.LimitReached(k) {
			return false, nil
		}
	}
	return true, nil
}
