package core

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
)

// FailureMode says what a Limiter does when its store fails. The zero value
// is FailOpen.
//
// A store that knows its failure domains (the Redis stores: one per node)
// may report that only some of a request's buckets failed, with a
// PartialError, having changed none of the others. The mode then decides
// the failed tiers only, as far as all-or-nothing allows: FailOpen counts
// them as allowing and has the store decide the rest in a second call;
// FailFallback has its in-memory store decide them first and, if it allows,
// the store the rest (a denial by the rest leaves what the fallback took
// taken: the fallback under-admits, the store stays exact); FailClosed
// denies the whole request. Each store call is bounded on its own, so a
// partial failure can cost two bounds.
type FailureMode uint8

const (
	// FailOpen allows the request and reports the error in the decision.
	// The default.
	FailOpen FailureMode = iota
	// FailClosed denies the request: AllowN returns an error wrapping
	// ErrUnavailable and a decision with ReasonUnavailable and a RetryAfter
	// of 1s or, when the store's circuit breaker refused the call (a
	// *BreakerOpenError), the rest of its cooldown.
	FailClosed
	// FailFallback decides the request on an in-memory store with the same
	// rules, private to the limiter, and reports the error in the decision.
	FailFallback
)

// String names the mode.
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	case FailFallback:
		return "fallback"
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// unavailableRetry is the Retry-After given when failing closed.
const unavailableRetry = time.Second

// Observer is called once per call of Allow, AllowN, AllowAt, Wait (per
// decision it makes) and WaitN, on the calling goroutine, after the decision
// is made: with the decision, or with the error returned when there is none.
// Calls from concurrent decisions run concurrently, so an Observer must be
// safe for concurrent use. It must not retain e or what it points to, and
// should be quick: metrics and audit logs attach here. Inspect calls no
// observer.
type Observer func(ctx context.Context, e *Event)

// Event is what an Observer sees of one decision. Its pointers are valid
// during the call only.
type Event struct {
	// Request is the request decided; read only.
	Request *Request
	// Decision is the decision returned: the zero Decision when Err is an
	// error that comes without one (bad input, the caller's context ending,
	// a store failure under FailClosed has one). Read only.
	Decision *Decision
	// Err is the error returned with the decision, nil if none.
	Err error
	// Latency is the limiter's own time for the decision, from the call to
	// the decision (policy resolution, key building, the store call), when
	// Timed. Measuring takes two clock reads, so one decision in
	// WithLatencySampling's n is timed.
	Latency time.Duration
	// Timed reports whether Latency was measured for this decision.
	Timed bool
}

// Option configures a Limiter; pass options to NewLimiter. Options are
// applied in order, so a later one replaces an earlier one of the same kind.
// A nil Option is an error.
type Option interface{ apply(*config) }

type config struct {
	store       Store
	failure     FailureMode
	observers   []Observer
	tally       *Tally
	latency     func(context.Context, time.Duration)
	denials     func(context.Context, Denial)
	denialsGate *DenialGate
	sampling    int
	shadow      bool
	logger      *slog.Logger
	timeout     time.Duration
	errs        []error // what the options got wrong, in order
}

// fail records an error wrapping ErrInvalidOption; NewLimiter returns them.
func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...))
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// isNil reports whether v is nil or holds a nil pointer, function, map,
// slice, channel or interface: a Store or Clock in an interface that would
// fail on its first call must be refused when it is given, not called.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Func, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// WithStore sets the store, which the Limiter shares with whoever else holds
// it. The default, without this option, is a new MemoryStore private to the
// Limiter. A nil s (or an interface holding a nil pointer) and a MemoryStore
// not made by NewMemoryStore make NewLimiter fail with ErrInvalidOption: a
// nil store never silently means the default.
func WithStore(s Store) Option {
	return optionFunc(func(c *config) {
		if isNil(s) {
			c.fail("WithStore: store is nil")
			return
		}
		if m, ok := s.(*MemoryStore); ok && !m.constructed() {
			c.fail("WithStore: MemoryStore not made by NewMemoryStore")
			return
		}
		c.store = s
	})
}

// WithFailureMode sets what happens when the store fails. The default is
// FailOpen; a mode other than FailOpen, FailClosed and FailFallback makes
// NewLimiter fail with ErrInvalidOption.
func WithFailureMode(m FailureMode) Option {
	return optionFunc(func(c *config) { c.failure = m })
}

// WithObserver adds a function called with every decision (see Observer).
// It may be given several times: the observers are called in the order
// given. The default is none; a nil o makes NewLimiter fail with
// ErrInvalidOption.
func WithObserver(o Observer) Option {
	return optionFunc(func(c *config) {
		if o == nil {
			c.fail("WithObserver: observer is nil")
			return
		}
		c.observers = append(c.observers, o)
	})
}

// DefaultLatencySampling is the default of WithLatencySampling: one decision
// in 16 is timed.
const DefaultLatencySampling = 16

// WithTally counts every decision in t, as an Observer calling t.Record
// would, and passes the decision time of each timed decision (see
// WithLatencySampling) to latency, if not nil, with the decision's context. The limiter calls t
// directly, so the event it counts is neither copied nor pooled: a
// decision costs less than with an Observer (a metrics adapter built on a
// Tally offers this as its Option). It may be given once; observers still
// run after it. A nil t makes NewLimiter fail with ErrInvalidOption.
func WithTally(t *Tally, latency func(ctx context.Context, d time.Duration)) Option {
	return optionFunc(func(c *config) {
		switch {
		case t == nil:
			c.fail("WithTally: tally is nil")
		case c.tally != nil && c.tally != t:
			c.fail("WithTally: given twice, with two tallies")
		default:
			c.tally, c.latency = t, latency
		}
	})
}

// Denial is one tier's denial of a request, as WithDenials reports it: a
// plain value, valid after the call.
type Denial struct {
	Rule  *Rule  // the denying tier's rule; read only
	Limit *Limit // the limit it applied; read only
	// Identity is the request's identity in the rule's scope: the
	// bucket's key within the rule.
	Identity string
	// User, IP and Endpoint are the request's identities ("" when absent).
	User, IP, Endpoint string
	// At is the time the store decided at (Decision.At), or the time of
	// the call when the store did not say.
	At        time.Time
	Remaining int64 // the tier's whole tokens left
	// Shadow: the tier is in shadow mode; it did not deny the request,
	// which Decision.ShadowDenied then says.
	Shadow bool
}

// WithDenials calls deny on the calling goroutine for every tier that
// denies a request (shadow tiers included), once its decision is made,
// before the observers, with the decision's context: an audit log of
// violations attaches here. Unlike an Observer's event, a Denial is a
// value, so the limiter makes no copy of the decision for it, and a
// decision that no tier denies costs nothing more. deny must be safe for
// concurrent use and quick. It may be given once (WithGatedDenials
// included); a nil deny makes NewLimiter fail with ErrInvalidOption.
func WithDenials(deny func(ctx context.Context, v Denial)) Option {
	return withDenials("WithDenials", nil, deny)
}

// WithGatedDenials is WithDenials with a gate: while gate is shut, a
// denied decision makes no Denial and deny is not called; the limiter adds
// the number of its denying tiers to gate.Dropped instead. A recorder that
// cannot take more (a full queue) shuts its gate, and a deny flood then
// costs a request one load and one addition, instead of Denials it would
// drop. Neither may be nil.
func WithGatedDenials(gate *DenialGate, deny func(ctx context.Context, v Denial)) Option {
	if gate == nil || gate.cells == nil {
		return optionFunc(func(c *config) { c.fail("WithGatedDenials: gate is nil or not made by NewDenialGate") })
	}
	return withDenials("WithGatedDenials", gate, deny)
}

func withDenials(name string, gate *DenialGate, deny func(context.Context, Denial)) Option {
	return optionFunc(func(c *config) {
		switch {
		case deny == nil:
			c.fail("%s: function is nil", name)
		case c.denials != nil:
			c.fail("%s: given twice (WithDenials and WithGatedDenials count as one)", name)
		default:
			c.denials, c.denialsGate = deny, gate
		}
	})
}

// WithLatencySampling times one decision in n, at random, for the observers
// (Event.Latency): timing takes two clock reads, which cost as much as the
// rest of an in-memory decision. 1 times every decision. n must be at least
// 1; the default is DefaultLatencySampling. Without observers nothing is
// timed.
func WithLatencySampling(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 {
			c.fail("WithLatencySampling: n must be >= 1, got %d", n)
			return
		}
		c.sampling = n
	})
}

// WithShadow puts every rule in shadow mode when on (see Rule.Shadow): the
// limiter decides, reports through Decision, observers and (by choice)
// headers, and never denies. A request that shadow tiers alone would deny
// is allowed with Decision.ShadowDenied set. A shadow tier never delays a
// request (Decision.Delay), and makes a Decision's summary only when every
// tier is in shadow mode, as under WithShadow(true): when an enforced tier
// applies, the client is told and waits what the enforced tiers say.
// Tokens are taken as if the shadow tiers were enforced, so that their
// buckets show what enforcing them would do: such a request takes nothing
// from the shadow tiers (a denied request takes nothing), and the enforced
// tiers, if any, are charged in a second store call, since the request
// does go ahead. A request that every tier allows is charged on every
// tier, in one call. The default is off.
func WithShadow(on bool) Option {
	return optionFunc(func(c *config) { c.shadow = on })
}

// WithLogger makes the limiter log through logger: store failures that a
// failure mode decided or that failed the request, at most one record per
// kind of failure (see ErrorKind) every LogInterval, with a count of those
// left out. The default, nil, logs nothing. Middlewares built on the limiter
// log their key-function and store errors through it too (Logger).
func WithLogger(logger *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if logger == nil {
			c.fail("WithLogger: logger is nil")
			return
		}
		c.logger = logger
	})
}

// WithTimeout bounds every store call by d, on top of the caller's context.
// A call that runs out of d is a store failure, which the failure mode
// decides; the caller's own context ending is not. The default, 0, adds no
// bound; d < 0 is rejected. The MemoryStore, which neither waits nor fails,
// is never bounded.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// Limiter decides requests against a policy, all tiers at once. Make one
// with NewLimiter; it is safe for concurrent use and must not be copied.
//
// The zero value, like a nil *Limiter, is not usable: its methods that
// return an error return one wrapping ErrNotConstructed, Policy returns nil
// None of them panics.
type Limiter struct {
	policy   atomic.Pointer[Policy]
	store    Store
	fallback *MemoryStore
	failure  FailureMode
	observer []Observer
	tally    *Tally                               // WithTally's, counted directly
	denials  func(context.Context, Denial)        // WithDenials'
	gate     *DenialGate                          // WithGatedDenials'; nil: none
	latency  func(context.Context, time.Duration) // WithTally's, for timed decisions
	sampling uint32                               // time one decision in sampling for the observers
	shadow   bool                                 // every rule in shadow mode
	log      *LogThrottle
	timeout  time.Duration // bound on each store call; 0: none
	memory   *MemoryStore  // store, when it is one
	takes    sync.Pool     // *Take, for stores other than memory
	checks   policyChecks  // run on every policy SetPolicy gets: see AddPolicyCheck
	leases   *leaseTable   // the leases of leased rules, when store is a Leaser
	// direct: the store is memory, which never fails, and nothing observes
	// decisions (no observer, tally or denials) nor puts every rule in
	// shadow mode: Decide may call decideOne without run's and decide's
	// layers.
	direct bool
}

// NewLimiter returns a limiter for policy with opts applied in order over
// the defaults (a new MemoryStore, FailOpen, no observer, no timeout). It
// fails with an error wrapping ErrInvalidOption, naming the option at fault,
// for a nil policy, a nil option (named by its position in opts, counted
// from 0), a nil store or observer, an unknown failure mode or a negative
// timeout; every mistake found is
// reported, joined with errors.Join. It fails too when policy has a leased
// rule (see Lease) and the store is neither a Leaser nor the MemoryStore.
func NewLimiter(policy *Policy, opts ...Option) (*Limiter, error) {
	var cfg config
	for i, o := range opts {
		if o == nil {
			cfg.fail("NewLimiter: option %d is nil", i)
			continue
		}
		o.apply(&cfg)
	}
	if policy == nil {
		cfg.fail("NewLimiter: policy is nil")
	}
	if cfg.failure > FailFallback {
		cfg.fail("WithFailureMode: unknown failure mode %d", cfg.failure)
	}
	if cfg.timeout < 0 {
		cfg.fail("WithTimeout: timeout must be >= 0, got %v", cfg.timeout)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	if cfg.sampling == 0 {
		cfg.sampling = DefaultLatencySampling
	}
	l := &Limiter{store: cfg.store, failure: cfg.failure, observer: cfg.observers, tally: cfg.tally, latency: cfg.latency, denials: cfg.denials, gate: cfg.denialsGate, sampling: uint32(cfg.sampling), shadow: cfg.shadow, timeout: cfg.timeout}
	if cfg.logger != nil {
		l.log = NewLogThrottle(cfg.logger, LogInterval)
	}
	if l.store == nil {
		m, err := NewMemoryStore()
		if err != nil {
			return nil, err
		}
		l.store = m
	}
	if l.failure == FailFallback {
		m, err := NewMemoryStore()
		if err != nil {
			return nil, err
		}
		l.fallback = m
	}
	l.memory, _ = l.store.(*MemoryStore)
	l.direct = l.memory != nil && len(l.observer) == 0 && l.tally == nil && l.denials == nil && !l.shadow
	if ls, ok := l.store.(Leaser); ok && l.memory == nil {
		l.leases = newLeaseTable(ls)
	}
	if err := l.checkLeaser(policy); err != nil {
		return nil, err
	}
	l.policy.Store(policy)
	l.takes.New = func() any { return new(Take) }
	return l, nil
}

// constructed reports whether l was made by NewLimiter, which always sets a
// store.
func (l *Limiter) constructed() bool { return l != nil && l.store != nil }

// errNotConstructed is the error of every method of an unusable Limiter.
func errNotConstructed() error {
	return fmt.Errorf("%w: Limiter is a zero value or nil; make one with NewLimiter", ErrNotConstructed)
}

// Policy returns the policy in force, or nil for a Limiter not made by
// NewLimiter. It is safe for concurrent use with SetPolicy.
func (l *Limiter) Policy() *Policy {
	if !l.constructed() {
		return nil
	}
	return l.policy.Load()
}

// SetPolicy replaces the policy for every later decision, without a
// restart; decisions under way finish with the policy they started with.
// Buckets are keyed by rule name and identity, so a rule that keeps its name
// keeps its buckets.
//
// p must pass every check registered with AddPolicyCheck, as the policy
// given to NewLimiter passed them when they were registered: the
// middlewares built on l register one each, which refuses a rule on a scope
// the middleware has no key function for (its tier would silently never
// apply). A refused p never takes effect: the policy in force stays, and
// the errors of the checks it failed are returned, joined, wrapping
// ErrInvalidOption; a middleware's names the rule, its scope and the
// middleware. SetPolicy also fails with an error wrapping ErrInvalidOption
// for a nil p or one with a leased rule (see Lease) when the store is
// neither a Leaser nor the MemoryStore, and ErrNotConstructed for a Limiter
// not made by NewLimiter. It is safe for concurrent use.
func (l *Limiter) SetPolicy(p *Policy) error {
	if !l.constructed() {
		return errNotConstructed()
	}
	if p == nil {
		return fmt.Errorf("%w: SetPolicy: policy is nil", ErrInvalidOption)
	}
	if err := l.checkLeaser(p); err != nil {
		return err
	}
	return l.checks.setPolicy(&l.policy, p)
}

// Allow reports whether one request may happen now. It is AllowN(ctx, req, 1).
func (l *Limiter) Allow(ctx context.Context, req Request) (d Decision, err error) {
	err = l.run(ctx, nil, time.Time{}, &req, 1, &d)
	return d, err
}

// AllowN reports whether a request of cost n may happen now, and if so
// consumes n from every tier that applies. n = 0 reads the tiers without
// consuming. Every applicable rule must allow it; if one denies, no tier
// changes.
//
// The error is non-nil for input no configuration can make valid (a cost
// outside [0, MaxCost], an identity that is too long or holds control
// characters); wrapping ErrUnavailable (and ErrBreakerOpen if the store's
// breaker refused the call) when the store fails and the limiter fails closed; wrapping
// ctx's error when ctx is canceled or expires during the store call, which is
// not a store failure; and wrapping ErrNotConstructed for a Limiter not made
// by NewLimiter. Under FailOpen and FailFallback a store failure is reported
// in Decision.Err, not as an error. AllowN is safe for concurrent use, as
// are Allow, AllowAt, Wait and WaitN.
func (l *Limiter) AllowN(ctx context.Context, req Request, n int64) (d Decision, err error) {
	err = l.run(ctx, nil, time.Time{}, &req, n, &d)
	return d, err
}

// Decide is AllowN with the request read through req, which it neither
// keeps nor changes, and the decision written into d, which it overwrites
// whole: the same decision, without the copies of a Decision (504 bytes,
// eight tiers inline) and of a Request that returning and passing them by
// value cost. It is for hot paths and middlewares that keep the decision
// where they use it. A nil req or d is an error wrapping ErrNilArgument.
func (l *Limiter) Decide(ctx context.Context, req *Request, n int64, d *Decision) error {
	return l.decideUnder(ctx, nil, req, n, d)
}

// DecideUnder is Decide under p rather than the policy in force when it
// runs: for a middleware that keyed req for the policy Policy returned, so
// that a SetPolicy in between cannot decide the request under tiers it was
// not keyed for. p is meant to be such a policy, one l has had in force
// (SetPolicy's doc: decisions under way finish with the policy they
// started with); DecideUnder does not run the checks of AddPolicyCheck on
// it. A nil p is an error wrapping ErrNilArgument, and a p with a leased
// rule an error wrapping ErrInvalidOption when SetPolicy would refuse it
// for that.
func (l *Limiter) DecideUnder(ctx context.Context, p *Policy, req *Request, n int64, d *Decision) error {
	if p == nil {
		if d != nil {
			*d = Decision{}
		}
		return fmt.Errorf("%w: DecideUnder: the policy is nil", ErrNilArgument)
	}
	if p.leased && l.constructed() {
		if err := l.checkLeaser(p); err != nil {
			if d != nil {
				*d = Decision{}
			}
			return err
		}
	}
	return l.decideUnder(ctx, p, req, n, d)
}

// decideUnder is Decide under p, or the policy in force when p is nil.
func (l *Limiter) decideUnder(ctx context.Context, p *Policy, req *Request, n int64, d *Decision) error {
	switch {
	case d == nil:
		return fmt.Errorf("%w: Decide: the decision is nil", ErrNilArgument)
	case req == nil:
		*d = Decision{}
		return fmt.Errorf("%w: Decide: the request is nil", ErrNilArgument)
	}
	if l != nil && l.direct {
		// What run would do, without its layer; and for a plain policy,
		// what decide would do, without its. decideOne and decidePlain
		// write every field of d themselves.
		if p == nil {
			p = l.policy.Load()
		}
		if !validCost(n) {
			d.clear()
			return l.decide(ctx, p, time.Time{}, req, n, d) // its error
		}
		if p.plain && !p.leased && !p.shadow {
			// The store's clock, read here, not in a call of its own:
			// s.now, inlined (an injected clock, for tests, is read
			// after the monotonic one).
			s := l.memory
			at := s.wall0 + int64(time.Since(s.mono0))
			if s.clock != nil {
				at = s.clockNow()
			}
			if len(p.rules) == 1 {
				return l.decideOne(p, at, req, n, d)
			}
			if l.decidePlain(p, at, req, n, d) {
				return nil
			}
		}
		d.clear()
		return l.decideOnStack(ctx, p, time.Time{}, req, n, d)
	}
	d.clear()
	return l.run(ctx, p, time.Time{}, req, n, d)
}

// AllowAt is AllowN at an explicit time instead of the store's clock. It
// exists for tests and replays; a shared store then trusts the caller's
// clock. now must lie between the Unix epoch and MaxTime(); a zero now is an
// error wrapping ErrInvalidTime.
func (l *Limiter) AllowAt(ctx context.Context, now time.Time, req Request, n int64) (d Decision, err error) {
	if !l.constructed() {
		return d, errNotConstructed()
	}
	if now.IsZero() {
		return d, fmt.Errorf("%w: zero time", ErrInvalidTime)
	}
	err = l.run(ctx, nil, now, &req, n, &d)
	return d, err
}

// Inspect reports the state of every tier that applies to req without
// consuming anything: AllowN with a cost of 0, which every store answers
// by reading only. It calls no observer and logs nothing, so that an
// operator looking at a key does not show in metrics or audit logs. Its
// errors are AllowN's.
func (l *Limiter) Inspect(ctx context.Context, req Request) (d Decision, err error) {
	err = l.decide(ctx, nil, time.Time{}, &req, 0, &d)
	return d, err
}

// Resetter is a Store that can reset a bucket: make it full, as if new. The
// MemoryStore and the Redis stores are Resetters.
type Resetter interface {
	// Reset makes bucket (rule, id) full. A bucket that does not exist is
	// full already, which is no error. id must pass CheckKey.
	Reset(ctx context.Context, rule, id string) error
}

// Reset makes every bucket of every tier that applies to req full, as if
// new: the operator's way to unblock a client. It fails with an error
// wrapping errors.ErrUnsupported when the store is not a Resetter, and with
// the store's error, naming the rule, for the first bucket it could not
// reset (those before it are reset). Under FailFallback it resets the
// fallback's buckets too. It is safe for concurrent use with decisions,
// which see each bucket before or after its reset.
func (l *Limiter) Reset(ctx context.Context, req Request) error {
	if !l.constructed() {
		return errNotConstructed()
	}
	rs, ok := l.store.(Resetter)
	if !ok {
		return fmt.Errorf("ratelimit: Reset: the store (%T) cannot reset buckets: %w", l.store, errors.ErrUnsupported)
	}
	buckets, _, err := l.policy.Load().resolve(ctx, &req, nil, nil)
	if err != nil {
		return err
	}
	for _, b := range buckets {
		if err := rs.Reset(ctx, b.Rule, b.Key); err != nil {
			return fmt.Errorf("ratelimit: rule %q: reset: %w", b.Rule, err)
		}
		if l.fallback != nil {
			l.fallback.Reset(ctx, b.Rule, b.Key)
		}
	}
	return nil
}

// Wait blocks until one request may proceed. It is WaitN(ctx, req, 1).
func (l *Limiter) Wait(ctx context.Context, req Request) (Decision, error) {
	return l.WaitN(ctx, req, 1)
}

// WaitN blocks until a request of cost n may proceed, or ctx ends. A shaping
// tier's delay is waited out; a denial is retried after its RetryAfter. It
// returns an error wrapping ErrLimited, without waiting, when the cost can
// never pass or the wait would outlast ctx's deadline, and ctx's error if ctx
// ends while waiting. It returns AllowN's errors, without waiting, as AllowN
// does.
//
// Tokens taken for a shaping delay stay taken when the request does not go
// ahead: no store can give them back (a Leaser's ReturnLease takes token
// buckets only), so the slot stays reserved and later requests wait behind
// it. When the delay would outlast ctx's deadline, the Decision returned
// with ErrLimited is therefore a denial (Allowed false, ReasonLimited) with
// the delay as its RetryAfter and no Delay, while its tiers show the tokens
// taken.
func (l *Limiter) WaitN(ctx context.Context, req Request, n int64) (Decision, error) {
	for {
		var d Decision
		if err := l.run(ctx, nil, time.Time{}, &req, n, &d); err != nil {
			return d, err
		}
		wait := d.Delay
		if !d.Allowed {
			if d.Reason == ReasonCostExceedsLimit {
				return d, fmt.Errorf("%w: cost %d exceeds rule %q", ErrLimited, n, d.Rule)
			}
			wait = d.RetryAfter
		}
		if wait > 0 {
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				if d.Allowed {
					// A shaping delay: the request does not go ahead.
					d.Allowed, d.Reason, d.RetryAfter, d.Delay = false, ReasonLimited, wait, 0
				}
				return d, fmt.Errorf("%w: rule %q needs %v, past the context deadline", ErrLimited, d.Rule, wait)
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return d, ctx.Err()
			}
		}
		if d.Allowed {
			return d, nil
		}
	}
}

// decide decides req into d, which is the zero Decision, under p, or the
// policy in force when p is nil: writing through a pointer, not returning
// the Decision by value, spares each layer a copy of it.
func (l *Limiter) decide(ctx context.Context, p *Policy, now time.Time, req *Request, n int64, d *Decision) error {
	if !l.constructed() {
		return errNotConstructed()
	}
	if err := checkCost(n); err != nil {
		return err
	}
	if !now.IsZero() {
		if err := checkTime(now); err != nil {
			return err
		}
	}
	if p == nil {
		p = l.policy.Load()
	}
	if l.memory != nil && !l.shadow && p.plain && !p.leased && !p.shadow {
		at := l.memory.nowOr(now)
		if len(p.rules) == 1 {
			return l.decideOne(p, at, req, n, d)
		}
		if l.decidePlain(p, at, req, n, d) {
			return nil
		}
	}
	return l.decideOnStack(ctx, p, now, req, n, d)
}

// decideOnStack is decideOn with room for the tiers on its stack frame.
func (l *Limiter) decideOnStack(ctx context.Context, p *Policy, now time.Time, req *Request, n int64, d *Decision) error {
	// The tiers live on this stack frame, up to maxInlineTiers; the
	// memory store takes them as they are, so a decision allocates nothing.
	// Separate variables, not a Take: escape analysis treats a struct as a
	// whole, and now's *time.Location escapes on the interface path.
	if len(p.rules) <= 4 {
		// The usual tiers (user, endpoint, IP, global) in half the room
		// to zero.
		var (
			bucketArr [4]Bucket
			stateArr  [4]BucketState
			ruleArr   [4]*Rule
		)
		return l.decideOn(ctx, p, now, req, n, d, bucketArr[:0], stateArr[:], ruleArr[:0])
	}
	var (
		bucketArr [maxInlineTiers]Bucket
		stateArr  [maxInlineTiers]BucketState
		ruleArr   [maxInlineTiers]*Rule
	)
	return l.decideOn(ctx, p, now, req, n, d, bucketArr[:0], stateArr[:], ruleArr[:0])
}

// decideOne is decideOn for a policy of one plain rule (no plan, routes,
// predicate, lookup, lease or shadow mode) on the memory store, at at
// (Unix ns): the same decision, without the slices of the general path.
func (l *Limiter) decideOne(p *Policy, at int64, req *Request, n int64, d *Decision) error {
	r := &p.rules[0]
	id := req.identityOf(p.scopes[0], r.Scope)
	if id == "" {
		d.clear()
		d.Allowed, d.Cost = true, n
		return nil
	}
	s := l.memory
	var rt *ruleTable
	if st := r.mem.p.Load(); st != nil && st.s == s {
		rt = st.rt // s.tableFor, inlined
	} else {
		rt = s.tableOf(r)
	}
	var st BucketState
	// An identity the table holds was valid when its bucket was made:
	// only one it does not hold is checked, before a bucket is made.
	if !s.takeFastIn(rt, id, &r.Limit, &st, at, n) {
		if !validShort(id) && !validKey(id) {
			d.clear()
			return invalidIdentity(r, id)
		}
		s.takeSlow(r, id, &r.Limit, &st, at, n)
	}
	// Every field of d, written after the store's compare-and-swap: stores
	// before it would have to drain first.
	d.fillOne(r, &r.Limit, &st, false)
	d.Cost, d.At = n, time.Unix(0, at)
	d.Degraded, d.Err, d.ShadowDenied = false, nil, false
	return nil
}

// plainTiers is how many rules a plain policy decidePlain decides has at
// most: the usual tiers (user, endpoint, IP, global). Its room is zeroed
// before the first compare-and-swap, which waits for those stores; a
// policy of more rules takes the general path, which allocates nothing
// either up to maxInlineTiers.
const plainTiers = 4

// decidePlain is decideOn for a plain policy of up to plainTiers rules (see
// decideOne) on the memory store, at at (Unix ns), into d, every field of which it writes,
// when the bucket of each tier that applies exists, a token bucket or
// shaping entry written under its rule's limit: the same decision, without
// the Buckets, the states and the layers of the general path. It reports
// false for the other cases (a bucket to make, a window), which decideOn
// decides, having written nothing in d but records it cleared again: a d
// that was the zero Decision still is. An identity is checked there only,
// as one the tables hold was valid when its bucket was made.
func (l *Limiter) decidePlain(p *Policy, at int64, req *Request, n int64, d *Decision) bool {
	if len(p.rules) > plainTiers {
		return false
	}
	s := l.memory
	var (
		rules [plainTiers]*Rule
		ents  [plainTiers]*entry
	)
	k := 0
	for i := range p.rules {
		r := &p.rules[i]
		id := req.identityOf(p.scopes[i], r.Scope)
		if id == "" {
			continue
		}
		if !r.Limit.isBucket() {
			return false
		}
		var rt *ruleTable
		if st := r.mem.p.Load(); st != nil && st.s == s {
			rt = st.rt // s.tableFor, inlined
		} else {
			rt = s.tableOf(r)
		}
		var e *entry
		if len(id) == 1 && id[0] == '*' {
			// A global rule's bucket, on every request: findStar
			// without its call while the entry it found lives.
			if e = rt.star.Load(); e == nil || e.word.Load() == wordDead {
				e = s.findStar(rt)
			}
		} else {
			h := maphash.String(s.seed, id)
			e = rt.shard(h).tab.Load().find(h, id)
		}
		if e == nil || e.shape != shapeOf(&r.Limit) {
			return false
		}
		rules[k], ents[k] = r, e
		k++
	}
	if k == 0 {
		d.clear()
		d.Allowed, d.Cost = true, n
		return true
	}
	if !decideTiers(ents[:k], rules[:k], at, n, d) {
		return false // an entry was dropped meanwhile
	}
	d.Cost, d.At = n, time.Unix(0, at)
	d.Degraded, d.Err, d.ShadowDenied = false, nil, false
	return true
}

// decideOn is decide with p, and room for the tiers in buckets, states and
// rules (empty, states at full length).
func (l *Limiter) decideOn(ctx context.Context, p *Policy, now time.Time, req *Request, n int64, d *Decision, buckets []Bucket, states []BucketState, rules []*Rule) error {
	buckets, rules, err := p.resolve(ctx, req, buckets, rules)
	if err != nil {
		return err
	}
	if len(buckets) > len(states) {
		states = make([]BucketState, len(buckets))
	}
	states = states[:len(buckets)]
	if p.leased && l.leases != nil {
		err = l.settleLeased(ctx, now, n, buckets, states, rules, d)
	} else {
		err = l.settle(ctx, now, n, buckets, states, rules, d)
	}
	if err == nil && !d.Allowed && (l.shadow || p.shadow) && d.shadowOnly() {
		return l.unshadow(ctx, p.leased, now, n, buckets, rules, d)
	}
	return err
}

// resolve appends to buckets and rules the bucket and rule of every tier
// that applies to req, in policy order.
func (p *Policy) resolve(ctx context.Context, req *Request, buckets []Bucket, rules []*Rule) ([]Bucket, []*Rule, error) {
	plan := req.Plan
	if len(p.known) > 0 {
		var err error
		if plan, err = p.plan(req); err != nil {
			return nil, nil, err
		}
	}
	if p.plain {
		// What the general path below does for such rules, without
		// asking each one about plans, routes, predicates and lookups.
		for i := range p.rules {
			id, err := p.plainIdentity(i, req)
			if err != nil {
				return nil, nil, err
			}
			if id != "" {
				r := &p.rules[i]
				buckets, rules = appendBucket(buckets, r.Name, id, &r.Limit), append(rules, r)
			}
		}
		return buckets, rules, nil
	}
	var err error
	if p.byRoute == nil && p.byMethod == nil {
		// No rule is scoped to routes: every rule is a candidate.
		for i := range p.rules {
			if buckets, rules, err = p.add(ctx, i, req, plan, buckets, rules); err != nil {
				return nil, nil, err
			}
		}
		return buckets, rules, nil
	}
	for it := p.candidates(req.Method, req.Route); ; {
		i, more := it.next()
		if !more {
			return buckets, rules, nil
		}
		if buckets, rules, err = p.add(ctx, i, req, plan, buckets, rules); err != nil {
			return nil, nil, err
		}
	}
}

// add appends rule i's bucket and the rule if it applies to req.
func (p *Policy) add(ctx context.Context, i int, req *Request, plan string, buckets []Bucket, rules []*Rule) ([]Bucket, []*Rule, error) {
	id, ok := p.applies(i, req, plan)
	if !ok {
		return buckets, rules, nil
	}
	r := &p.rules[i]
	if !validKey(id) {
		return nil, nil, invalidIdentity(r, id)
	}
	lim := &r.Limit
	if r.Lookup != nil {
		l, ok, err := r.Lookup.Limit(ctx, id)
		switch {
		case err != nil:
			return nil, nil, fmt.Errorf("ratelimit: rule %q: limit lookup: %w", r.Name, err)
		case ok && (l == nil || !l.decidable()):
			return nil, nil, fmt.Errorf("ratelimit: rule %q: limit lookup: %w: the limit of %q was not made by NewLimit", r.Name, ErrInvalidRule, id)
		case ok:
			lim = l
		}
	}
	return appendBucket(buckets, r.Name, id, lim), append(rules, r), nil
}

// appendBucket appends the bucket of key under limit l of rule, field by
// field: a Bucket built whole and copied in is read back in wide loads
// over narrower stores, which stall.
func appendBucket(buckets []Bucket, rule, key string, l *Limit) []Bucket {
	buckets = append(buckets, Bucket{})
	b := &buckets[len(buckets)-1]
	b.Rule, b.Key, b.Limit = rule, key, l
	return buckets
}

// plainIdentity returns the identity req has in the scope of rule i of a
// plain policy (see Policy.plain), "" for none, or the error for one that
// is not a valid key.
func (p *Policy) plainIdentity(i int, req *Request) (string, error) {
	id := req.identityOf(p.scopes[i], p.rules[i].Scope)
	if id != "" && !validShort(id) && !validKey(id) {
		return "", invalidIdentity(&p.rules[i], id)
	}
	return id, nil
}

// invalidIdentity is the error for identity id of rule r, which validKey
// refused.
func invalidIdentity(r *Rule, id string) error {
	return fmt.Errorf("ratelimit: rule %q: %s identity: %w", r.Name, r.Scope, CheckKey(id))
}

// settle decides a request on its buckets into d, the zero Decision: the
// store call, the failure mode when it fails, and the decision from the
// states.
func (l *Limiter) settle(ctx context.Context, now time.Time, n int64, buckets []Bucket, states []BucketState, rules []*Rule, d *Decision) error {
	d.Allowed, d.Cost = true, n
	if len(buckets) == 0 {
		return nil
	}
	var err error
	if l.memory != nil && len(buckets) == 1 {
		// Everything take would check was checked above.
		d.At = time.Unix(0, l.memory.takeRule(rules[0], buckets[0].Key, buckets[0].Limit, &states[0], now, n))
	} else if l.memory != nil {
		d.At = time.Unix(0, l.memory.takeRules(rules, buckets, states, now, n))
	} else {
		d.At, err = l.takeFrom(ctx, l.store, now, n, buckets, states)
		if err != nil && gaveUp(ctx, err) {
			// The caller gave up, which says nothing about the store.
			*d = Decision{}
			return err
		}
	}
	if err != nil {
		if pe := partialError(err, len(buckets)); pe != nil && l.failure != FailClosed {
			*d, err = l.decidePartial(ctx, now, n, pe, buckets, states, rules)
			return err
		}
		switch l.failure {
		case FailOpen:
			*d = Decision{Allowed: true, Cost: n, Degraded: true, Err: err}
			return nil
		case FailClosed:
			return failClosed(n, err, d)
		case FailFallback:
			t := Take{Now: now, Cost: n, Buckets: buckets, States: states}
			d.At, d.Degraded, d.Err = time.Unix(0, l.fallback.take(&t)), true, err
		}
	}
	d.fill(states, rules, buckets, l.shadow)
	return nil
}

// failClosed sets d to the denial of a request of cost n that the store's
// failure err decided under FailClosed, and returns the error wrapping
// ErrUnavailable to return with it.
func failClosed(n int64, err error, d *Decision) error {
	*d = Decision{Reason: ReasonUnavailable, Cost: n, RetryAfter: unavailableRetry, Degraded: true, Err: err}
	var uerr error
	if open := breakerOpen(err); open != nil {
		// An honest Retry-After: the store is not asked before then.
		d.RetryAfter = open.retryAfter(time.Now())
		if open == err {
			uerr = open.unavailable
		}
	}
	if uerr == nil {
		uerr = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return uerr
}

// unshadow decides a request that only shadow tiers denied (d, from one
// store call that took nothing): it goes ahead, so the enforced tiers are
// charged in a second call, which decides it; the shadow tiers keep what
// the first call said of them, having taken nothing, as if enforced.
func (l *Limiter) unshadow(ctx context.Context, leased bool, now time.Time, n int64, buckets []Bucket, rules []*Rule, d *Decision) error {
	var firstArr [maxInlineTiers]TierState
	first := firstArr[:0]
	for i := range d.NumTiers() {
		first = append(first, d.TierAt(i))
	}
	// The enforced tiers are taken from the request's buckets, not from
	// d's tiers: a failure mode may have left tiers out of d (FailOpen
	// leaves out the failed ones; a FailFallback denial that never asked
	// the store holds the failed ones only). Those the fallback decided and
	// charged in the first call (FailFallback, every failed tier allowed
	// there) are not charged again.
	var charged []bool
	if !leased {
		// The indices of d's PartialError are the request's on this
		// path; a leased request's name the store's part of it only.
		charged = fallbackCharged(l.failure, d, first, rules)
	}
	var (
		bucketArr [maxInlineTiers]Bucket
		stateArr  [maxInlineTiers]BucketState
		ruleArr   [maxInlineTiers]*Rule
	)
	eb, es, er := bucketArr[:0], stateArr[:0], ruleArr[:0]
	enforced := false
	for i := range buckets {
		if l.shadow || rules[i].Shadow {
			continue
		}
		enforced = true
		if charged != nil && charged[i] {
			continue
		}
		eb, es, er = append(eb, buckets[i]), append(es, BucketState{}), append(er, rules[i])
	}
	if !enforced {
		// Every tier is in shadow: allowed, nothing taken.
		d.Allowed, d.Reason, d.RetryAfter, d.ShadowDenied = true, ReasonNone, 0, true
		return nil
	}
	var out Decision
	if len(eb) > 0 {
		var err error
		if leased && l.leases != nil {
			err = l.settleLeased(ctx, now, n, eb, es, er, &out)
		} else {
			err = l.settle(ctx, now, n, eb, es, er, &out)
		}
		if err != nil {
			*d = out
			return err // a failure decided it
		}
		// With no tier (FailOpen left out every enforced one), the shadow
		// tiers and ShadowDenied below still say what would have denied.
	} else {
		// Every enforced tier was decided and charged by the fallback.
		for i := range buckets {
			if charged[i] {
				eb, er = append(eb, buckets[i]), append(er, rules[i])
				es = append(es, tierOf(first, rules[i]).BucketState)
			}
		}
		out.fill(es, er, eb, false)
		out.Cost, out.At = d.Cost, d.At
	}
	// Every tier, in policy order: the shadow ones and those the fallback
	// charged as the first call left them, the others as the second did.
	var secondArr [maxInlineTiers]TierState
	second := secondArr[:0]
	for i := range out.NumTiers() {
		second = append(second, out.TierAt(i))
	}
	var allArr [maxInlineTiers]TierState
	all := allArr[:0]
	for i, r := range rules {
		src := second
		if l.shadow || r.Shadow || charged != nil && charged[i] {
			src = first
		}
		if t := tierOf(src, r); t.Rule != nil {
			all = append(all, t)
		}
	}
	out.setTiers(len(all))
	for i := range all {
		out.setTier(i, &all[i])
	}
	out.ShadowDenied = out.Allowed
	if d.Degraded && !out.Degraded {
		out.Degraded, out.Err = true, d.Err // the first call's failure decided some tiers
	}
	*d = out
	return nil
}

// tierOf returns the tier of rule r among tiers, or the zero TierState.
func tierOf(tiers []TierState, r *Rule) TierState {
	for i := range tiers {
		if tiers[i].Rule == r {
			return tiers[i]
		}
	}
	return TierState{}
}

// fallbackCharged reports, per bucket of the request (rules), whether the
// fallback decided and charged it in the call that made d: under
// FailFallback, a partial failure whose failed tiers the fallback allowed
// (a take on the fallback, all or nothing, charges them all or none). nil
// when none was.
func fallbackCharged(mode FailureMode, d *Decision, first []TierState, rules []*Rule) []bool {
	if mode != FailFallback || !d.Degraded {
		return nil
	}
	// A PartialError the limiter takes for one: a malformed one made the
	// call a whole failure, which the fallback decided all or nothing.
	pe := partialError(d.Err, len(rules))
	if pe == nil {
		return nil
	}
	charged := make([]bool, len(rules))
	for _, i := range pe.Failed {
		if i < 0 || i >= len(rules) {
			return nil
		}
		t := tierOf(first, rules[i])
		if t.Rule == nil || !t.Allowed {
			return nil // the fallback denied: it took nothing
		}
		charged[i] = true
	}
	return charged
}

// shadowOnly reports whether every tier that denied d is in shadow mode.
func (d *Decision) shadowOnly() bool {
	for i := range d.NumTiers() {
		if t := d.TierAt(i); !t.Allowed && !t.Shadow {
			return false
		}
	}
	return true
}

// breakerOpen returns the breaker refusal err is or wraps, if any.
func breakerOpen(err error) *BreakerOpenError {
	var b *BreakerOpenError
	walkErr(err, func(e error) bool {
		b, _ = e.(*BreakerOpenError)
		return b != nil
	})
	return b
}

// partialError returns the PartialError err is or wraps when it names a
// proper, valid subset of n buckets; nil otherwise, and the whole take
// counts as failed.
func partialError(err error, n int) *PartialError {
	var pe *PartialError
	walkErr(err, func(e error) bool {
		pe, _ = e.(*PartialError)
		return pe != nil
	})
	if pe == nil || len(pe.Failed) == 0 || len(pe.Failed) >= n {
		return nil
	}
	for i, f := range pe.Failed {
		if f < 0 || f >= n || (i > 0 && f <= pe.Failed[i-1]) {
			return nil
		}
	}
	return pe
}

// walkErr calls found with err and every error it wraps, depth first as
// errors.As goes, until found returns true. Unlike errors.As it allocates
// nothing, which keeps a decision on an open breaker free of allocations.
func walkErr(err error, found func(error) bool) bool {
	for err != nil {
		if found(err) {
			return true
		}
		switch e := err.(type) {
		case interface{ Unwrap() error }:
			err = e.Unwrap()
		case interface{ Unwrap() []error }:
			for _, w := range e.Unwrap() {
				if walkErr(w, found) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// decidePartial decides a request whose store call failed for the buckets
// pe names only, the others being unchanged: the failure mode decides those,
// the store the others, all or nothing.
//
// FailOpen: the failed tiers count as allowing; the store decides the
// others in a second call, and the decision shows those tiers only. If that
// call fails too, the request is allowed as for a whole failure.
//
// FailFallback: the private in-memory store decides the failed tiers first.
// If it denies, the request is denied and the store is not called again. If
// it allows, the store decides the others: if they deny, the request is
// denied and what the fallback took stays taken (the fallback under-admits,
// the store stays exact); if the store fails again, the fallback decides
// them too.
func (l *Limiter) decidePartial(ctx context.Context, now time.Time, n int64, pe *PartialError, buckets []Bucket, states []BucketState, rules []*Rule) (Decision, error) {
	failed := make([]bool, len(buckets))
	for _, i := range pe.Failed {
		failed[i] = true
	}
	var (
		okB, badB []Bucket
		okR, badR []*Rule
	)
	for i := range buckets {
		if failed[i] {
			badB, badR = append(badB, buckets[i]), append(badR, rules[i])
		} else {
			okB, okR = append(okB, buckets[i]), append(okR, rules[i])
		}
	}
	okS, badS := make([]BucketState, len(okB)), make([]BucketState, len(badB))
	d := Decision{Allowed: true, Cost: n, Degraded: true, Err: pe}
	if l.failure == FailFallback {
		t := Take{Now: now, Cost: n, Buckets: badB, States: badS}
		d.At = time.Unix(0, l.fallback.take(&t))
		if !allAllowed(badS) {
			d.fill(badS, badR, badB, l.shadow)
			return d, nil
		}
	}
	at, err := l.takeFrom(ctx, l.store, now, n, okB, okS)
	switch {
	case err != nil && gaveUp(ctx, err):
		return Decision{}, err
	case err != nil && l.failure == FailOpen:
		d = Decision{Allowed: true, Cost: n, Degraded: true, Err: err}
		return d, nil
	case err != nil:
		t := Take{Now: now, Cost: n, Buckets: okB, States: okS}
		at, d.Err = time.Unix(0, l.fallback.take(&t)), err
	}
	if at.After(d.At) {
		d.At = at
	}
	if l.failure == FailOpen {
		d.fill(okS, okR, okB, l.shadow)
	} else {
		// Back in policy order.
		for i, j, k := 0, 0, 0; i < len(buckets); i++ {
			if failed[i] {
				states[i], j = badS[j], j+1
			} else {
				states[i], k = okS[k], k+1
			}
		}
		d.fill(states, rules, buckets, l.shadow)
	}
	return d, nil
}

func allAllowed(states []BucketState) bool {
	for i := range states {
		if !states[i].Allowed {
			return false
		}
	}
	return true
}

// takeFrom runs t on a store through a pooled Take: the store's method may
// retain its argument as far as the compiler can tell, and t's arrays must
// stay on the caller's stack.
func (l *Limiter) takeFrom(ctx context.Context, s Store, now time.Time, cost int64, buckets []Bucket, states []BucketState) (time.Time, error) {
	pt := l.takes.Get().(*Take)
	pt.Now, pt.Cost = now, cost
	pt.Buckets, pt.States = pt.Buckets[:0], pt.States[:0]
	for _, b := range buckets {
		pt.Buckets = append(pt.Buckets, b)
		pt.States = append(pt.States, BucketState{})
	}
	pt.At = time.Time{}
	var err error
	if l.timeout > 0 {
		tctx, cancel := context.WithTimeout(ctx, l.timeout)
		err = s.Take(tctx, pt)
		if err != nil && !ended(ctx) && ended(tctx) {
			// Our bound, not the caller's: a store failure, said as such.
			err = fmt.Errorf("ratelimit: store call exceeded WithTimeout(%v): %w", l.timeout, err)
		}
		cancel()
	} else {
		err = s.Take(ctx, pt)
	}
	if err == nil {
		copy(states, pt.States)
	}
	at := pt.At
	if at.IsZero() {
		at = now // a store that does not say: the explicit time, if any
	}
	clear(pt.Buckets) // drop references to strings and limits
	l.takes.Put(pt)
	return at, err
}

// gaveUp reports whether err is the caller's ctx ending, checked on the
// caller's ctx: a WithTimeout bound running out leaves it alive.
func gaveUp(ctx context.Context, err error) bool {
	return ended(ctx) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}

// ended reports whether ctx is done or past its deadline. A store's socket
// deadline and the context's timer fire at the same instant, so ctx.Err()
// alone can still be nil when the store returns.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// run is decide with the observers called and store failures logged.
func (l *Limiter) run(ctx context.Context, p *Policy, now time.Time, req *Request, n int64, d *Decision) error {
	if !l.constructed() || len(l.observer) == 0 && l.log == nil && l.tally == nil && l.denials == nil {
		return l.decide(ctx, p, now, req, n, d)
	}
	if len(l.observer) == 0 && l.tally == nil {
		// What the general path below does with no observer and no tally,
		// in a smaller frame: a gated deny flood costs a bare Allow denial
		// 3-7% here, 7-11% there (BenchmarkAuditOverhead).
		err := l.decide(ctx, p, now, req, n, d)
		if l.log != nil {
			l.logFailure(ctx, d, err)
		}
		if l.denials != nil && (!d.Allowed || d.ShadowDenied) {
			// Inline: a shut gate, the common case in a deny flood, costs
			// no call.
			if g := l.gate; g != nil && g.shut.Load() {
				g.Drop(d.denyingTiers())
			} else {
				l.handOver(ctx, req, d)
			}
		}
		return err
	}
	timed := (l.latency != nil || len(l.observer) > 0) && (l.sampling == 1 || rand.Uint32()%l.sampling == 0)
	var start time.Time
	if timed {
		start = time.Now()
	}
	err := l.decide(ctx, p, now, req, n, d)
	var latency time.Duration
	if timed {
		latency = time.Since(start)
	}
	if l.log != nil {
		l.logFailure(ctx, d, err)
	}
	if l.tally != nil {
		// A direct call, which keeps nothing of d: it stays where the
		// caller has it.
		l.tally.record(d, err)
		if timed && l.latency != nil {
			l.latency(ctx, latency)
		}
	}
	if l.denials != nil && (!d.Allowed || d.ShadowDenied) {
		if g := l.gate; g != nil && g.shut.Load() {
			g.Drop(d.denyingTiers())
		} else {
			l.handOver(ctx, req, d)
		}
	}
	if len(l.observer) == 0 {
		return err
	}
	// For the observers, the event and what it points to live in a pooled
	// object: observers are func values, which the compiler must assume
	// keep their arguments, so values on this stack would move to the
	// heap. It keeps its copies until its next use (or the pool's next
	// cleaning, at a GC): clearing them would cost a decision as much as
	// copying them.
	ob := observedPool.Get().(*observed)
	ob.r, ob.d = *req, *d
	ob.e = Event{Request: &ob.r, Decision: &ob.d, Err: err, Latency: latency, Timed: timed}
	for _, o := range l.observer {
		o(ctx, &ob.e)
	}
	observedPool.Put(ob)
	return err
}

// denyingTiers returns the number of tiers that denied d.
func (d *Decision) denyingTiers() int {
	n := 0
	for i := range d.NumTiers() {
		if d.deniedBy(i) {
			n++
		}
	}
	return n
}

// handOver calls WithDenials' function for each tier of d that denied req
// (run first asks the gate, if any).
func (l *Limiter) handOver(ctx context.Context, req *Request, d *Decision) {
	at := d.At
	if at.IsZero() {
		at = time.Now()
	}
	for i := range d.NumTiers() {
		t := d.TierAt(i)
		if t.Allowed || t.Rule == nil {
			continue
		}
		l.denials(ctx, Denial{
			Rule: t.Rule, Limit: t.limit(), Identity: req.Identity(t.Rule.Scope),
			User: req.User, IP: req.IP, Endpoint: req.Endpoint,
			At: at, Remaining: t.Remaining, Shadow: t.Shadow,
		})
	}
}

// observed is what an Observer's Event points to.
type observed struct {
	e Event
	r Request
	d Decision
}

var observedPool = sync.Pool{New: func() any { return new(observed) }}

// logFailure logs a store failure the decision reports or the error is.
func (l *Limiter) logFailure(ctx context.Context, d *Decision, err error) {
	if l.log == nil {
		return
	}
	failure := d.Err
	if failure == nil && errors.Is(err, ErrUnavailable) {
		failure = err
	}
	if failure == nil {
		return
	}
	kind := ErrorKind(failure)
	l.log.Log(ctx, slog.LevelWarn, "store:"+kind, "ratelimit: store failure",
		slog.String("kind", kind), slog.String("failure_mode", l.failure.String()),
		slog.Bool("denied", !d.Allowed), slog.String("error", failure.Error()))
}

// Observed reports whether l calls observers (WithObserver) with its
// decisions. A middleware gives them each request's route
// (Event.Request.Route), which it otherwise reads only when the policy
// needs it.
func (l *Limiter) Observed() bool { return l != nil && len(l.observer) > 0 }

// Logger returns the throttled logger made from WithLogger's, nil (which
// logs nothing) if none, so that middlewares built on l log where l does,
// under the same throttle.
func (l *Limiter) Logger() *LogThrottle {
	if !l.constructed() {
		return nil
	}
	return l.log
}

// TierState is one tier's answer to a request. The zero value has a nil
// Rule.
type TierState struct {
	Rule  *Rule  // the rule; read only
	Limit *Limit // the limit applied: the rule's, or the identity's from its Lookup; read only
	BucketState
	// Shadow: the tier was decided in shadow mode (Rule.Shadow or
	// WithShadow) and did not count towards Allowed, Delay or, unless
	// every tier is in shadow mode, the summary.
	Shadow bool
}

// limit returns t.Limit, or its rule's Limit for a TierState made without
// one.
func (t *TierState) limit() *Limit {
	if t.Limit != nil {
		return t.Limit
	}
	return &t.Rule.Limit
}

// inlineTiers is how many tiers the header formatting keeps on the stack.
const inlineTiers = 4

// maxInlineTiers is how many tiers a decision is made on, and a Decision
// holds, without allocating.
const maxInlineTiers = 8

// tierRec is a tier's state in a Decision, compact: TierAt expands it.
type tierRec struct {
	rule                  *Rule
	limit                 *Limit
	remaining, resetAfter int64
	wait                  int64 // RetryAfter when denied, Delay when allowed
}

// tierFlags holds a tier's Allowed (bit 0), Shadow (bit 1) and Reason
// (bits 2 and up).
type tierFlags uint8

// Decision is the outcome of one request against every tier that applies.
// The summary fields come from the deciding tier, chosen among the enforced
// tiers, or among the tiers in shadow mode only when every tier is: the
// denying one with the longest RetryAfter (a cost that can never pass counts
// as longest), or, when none of them denies, the one with the least
// Remaining. Delay is the longest an enforced tier asks for; a tier in
// shadow mode never sets it. A request to which no rule applies is allowed
// with Limit 0 and no tiers. The zero value is a denial with no tiers and
// no reason. A Decision is a plain value: several goroutines may read one,
// but none may write it meanwhile.
type Decision struct {
	Allowed    bool          // whether the request may proceed (after Delay)
	Reason     Reason        // why denied; ReasonNone when allowed
	Limit      int64         // the deciding tier's burst or window limit
	Remaining  int64         // the deciding tier's whole tokens left, >= 0
	ResetAfter time.Duration // until the deciding tier is full again
	RetryAfter time.Duration // when denied: until the cost can pass
	Delay      time.Duration // when allowed by an enforced shaping tier: wait this long first
	Rule       string        // the deciding tier's rule name
	Scope      Scope         // the deciding tier's scope
	Cost       int64         // the cost asked for
	// At is the time the store decided at: its clock (the Redis server's for
	// the Redis stores) or the explicit time. Resets in epoch form are
	// computed from it, so every instance reports the same instant. Zero when
	// no rule applied or the store failed under FailOpen or FailClosed.
	At time.Time

	// Degraded is true when the store failed, wholly or for some tiers
	// (see FailureMode), and the failure mode decided; Err is the store's
	// error: a *PartialError when some tiers failed, wrapping ErrBreakerOpen
	// when the store's circuit breaker refused the call.
	Degraded bool
	Err      error // see Degraded; nil when the store answered

	// ShadowDenied is true when tiers in shadow mode alone would have
	// denied the request, which was allowed (see WithShadow); the summary
	// fields then describe the enforced tiers (when every tier is in
	// shadow mode, the one that would have denied, with no Reason or
	// RetryAfter), and Tiers has the shadow tiers' states, denying.
	ShadowDenied bool

	n     int
	flags [maxInlineTiers]tierFlags
	tiers [maxInlineTiers]tierRec
	more  []TierState // the tiers, when more than maxInlineTiers
}

// NumTiers returns the number of tiers that applied; 0 for a nil d.
func (d *Decision) NumTiers() int {
	switch {
	case d == nil:
		return 0
	case d.more != nil:
		return len(d.more)
	}
	return d.n
}

// deniedBy reports whether tier i, 0 <= i < NumTiers(), denied and has a
// rule: a tier deny reports.
func (d *Decision) deniedBy(i int) bool {
	if d.more != nil {
		return !d.more[i].Allowed && d.more[i].Rule != nil
	}
	return d.flags[i]&1 == 0 && d.tiers[i].rule != nil
}

// TierAt returns the state of tier i, in policy order, for i from 0 to
// NumTiers()-1; the zero TierState for any other i. It allocates nothing.
func (d *Decision) TierAt(i int) TierState {
	var t TierState
	d.tierInto(i, &t)
	return t
}

// tierInto sets *t, field by field, to TierAt(i) (see gcraSpan).
func (d *Decision) tierInto(i int, t *TierState) {
	switch {
	case i < 0 || i >= d.NumTiers():
		*t = TierState{}
		return
	case d.more != nil:
		*t = d.more[i]
		return
	}
	r, f := &d.tiers[i], d.flags[i]
	t.Rule, t.Limit, t.Shadow = r.rule, r.limit, f&2 != 0
	t.Allowed, t.Reason = f&1 != 0, Reason(f>>2)
	t.Remaining, t.ResetAfter = r.remaining, time.Duration(r.resetAfter)
	if t.Allowed {
		t.Delay, t.RetryAfter = time.Duration(r.wait), 0
	} else {
		t.Delay, t.RetryAfter = 0, time.Duration(r.wait)
	}
}

// Tiers returns the state of every tier that applied, in policy order, in
// a new slice; nil for a nil d or when no rule applied. Paths that must not
// allocate use NumTiers and TierAt.
func (d *Decision) Tiers() []TierState {
	n := d.NumTiers()
	if n == 0 {
		return nil
	}
	out := make([]TierState, n)
	for i := range out {
		out[i] = d.TierAt(i)
	}
	return out
}

// Tier returns the deciding tier's state, and false when no rule applied or
// d is nil.
func (d *Decision) Tier() (TierState, bool) {
	for i := range d.NumTiers() {
		if t := d.TierAt(i); t.Rule.Name == d.Rule {
			return t, true
		}
	}
	return TierState{}, false
}

// setTiers makes room for n tiers, to be set with setTier. It clears the
// records the decision held past those the n tiers will be set in, so that
// a Decision's records past the ones it holds are always zero, as in a new
// one (which lets clear leave them alone).
func (d *Decision) setTiers(n int) {
	if d.n > n || n > maxInlineTiers {
		d.clearFrom(n)
	}
	d.n, d.more = n, nil
	if n > maxInlineTiers {
		d.more = make([]TierState, n)
	}
}

// clearFrom clears the records d holds from the one the tier n goes in
// (none when n is past the inline records: the tiers go in more).
func (d *Decision) clearFrom(n int) {
	if n > maxInlineTiers {
		n = 0
	}
	if held := min(max(d.n, 0), maxInlineTiers); held > n {
		clear(d.tiers[n:held])
		clear(d.flags[n:held])
	}
}

// setTier sets tier i, below the n of setTiers.
func (d *Decision) setTier(i int, t *TierState) {
	if d.more != nil {
		d.more[i] = *t
		return
	}
	d.setRec(i, t.Rule, t.Limit, &t.BucketState, t.Shadow)
}

func (d *Decision) setRec(i int, rule *Rule, limit *Limit, st *BucketState, shadow bool) {
	f := tierFlags(st.Reason) << 2
	wait := st.RetryAfter
	if st.Allowed {
		f |= 1
		wait = st.Delay
	}
	if shadow {
		f |= 2
	}
	d.flags[i] = f
	// Field by field, for the reason gcraSpan gives.
	t := &d.tiers[i]
	t.rule, t.limit = rule, limit
	t.remaining, t.resetAfter, t.wait = st.Remaining, int64(st.ResetAfter), int64(wait)
}

// fill sets d, the zero Decision, from the states of the tiers of rules,
// under the limits of buckets, or with buckets nil their rules' own.
func (d *Decision) fill(states []BucketState, rules []*Rule, buckets []Bucket, shadow bool) {
	n := len(states)
	limit := func(i int) *Limit {
		if buckets == nil {
			return &rules[i].Limit
		}
		return buckets[i].Limit
	}
	if n == 1 {
		d.fillOne(rules[0], limit(0), &states[0], shadow || rules[0].Shadow)
		return
	}
	d.setTiers(n)
	// The summary comes from the enforced tiers, from the shadow ones only
	// when every tier is in shadow mode, and Delay never from a shadow
	// tier: shadow tiers never change what the client is told or waits.
	// When shadow tiers alone deny, the enforced tier chosen here is
	// provisional: unshadow decides the request again on the enforced
	// tiers, and that decision's summary is the one returned.
	best, bestShadow := -1, -1
	allowed := true
	for i := range states {
		allowed = allowed && states[i].Allowed
	}
	for i := range states {
		st := &states[i]
		inShadow := shadow || rules[i].Shadow
		if d.more != nil {
			d.more[i] = TierState{Rule: rules[i], Limit: limit(i), BucketState: *st, Shadow: inShadow}
		} else {
			d.setRec(i, rules[i], limit(i), st, inShadow)
		}
		if inShadow {
			if bestShadow < 0 || decides(st, &states[bestShadow], allowed) {
				bestShadow = i
			}
			continue
		}
		if best < 0 || decides(st, &states[best], allowed) {
			best = i
		}
		if allowed && st.Delay > d.Delay {
			d.Delay = st.Delay
		}
	}
	if best < 0 {
		best = bestShadow // every tier in shadow mode
	}
	b := &states[best]
	r := rules[best]
	d.Allowed = allowed
	d.Reason = b.Reason
	d.Limit = limit(best).burst
	d.Remaining = b.Remaining
	d.ResetAfter = b.ResetAfter
	d.RetryAfter = b.RetryAfter
	d.Rule, d.Scope = r.Name, r.Scope
}

// summarize sets d's summary from its inline tier records, of rules, none
// in shadow mode: fill's choice of the deciding tier (decides), made on
// the records.
func (d *Decision) summarize(rules []*Rule) {
	allowed := true
	for i := range d.n {
		allowed = allowed && d.flags[i]&1 != 0
	}
	var best, t TierState
	by, delay := 0, time.Duration(0)
	for i := range d.n {
		d.tierInto(i, &t)
		delay = max(delay, t.Delay)
		if i == 0 || decides(&t.BucketState, &best.BucketState, allowed) {
			by, best = i, t
		}
	}
	d.Allowed, d.Reason = allowed, best.Reason
	d.Limit, d.Remaining, d.ResetAfter = best.Limit.burst, best.Remaining, best.ResetAfter
	d.RetryAfter, d.Delay = best.RetryAfter, 0
	if allowed {
		d.Delay = delay
	}
	d.Rule, d.Scope = rules[by].Name, rules[by].Scope
}

// clear makes d the zero Decision, field by field: of its tier records,
// it clears those it holds, the others being zero already (see setTiers),
// rather than all 504 bytes.
func (d *Decision) clear() {
	d.setTiers(0)
	d.Allowed, d.Reason, d.Limit, d.Remaining = false, ReasonNone, 0, 0
	d.ResetAfter, d.RetryAfter, d.Delay = 0, 0, 0
	d.Rule, d.Scope, d.Cost, d.At = "", "", 0, time.Time{}
	d.Degraded, d.Err, d.ShadowDenied = false, nil, false
}

// fillOne is fill for one tier, of rule r under l, which decides alone;
// in shadow mode, it sets no Delay.
func (d *Decision) fillOne(r *Rule, l *Limit, st *BucketState, shadow bool) {
	d.setTiers(1)
	d.setRec(0, r, l, st, shadow)
	d.Allowed, d.Reason, d.Delay = st.Allowed, st.Reason, 0
	if st.Allowed && !shadow {
		d.Delay = st.Delay
	}
	d.Limit, d.Remaining = l.burst, st.Remaining
	d.ResetAfter, d.RetryAfter = st.ResetAfter, st.RetryAfter
	d.Rule, d.Scope = r.Name, r.Scope
}

// decides reports whether a should decide the request rather than b.
func decides(a, b *BucketState, allowed bool) bool {
	if allowed {
		return a.Remaining < b.Remaining
	}
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	ra, rb := a.Reason == ReasonCostExceedsLimit, b.Reason == ReasonCostExceedsLimit
	if ra != rb {
		return ra
	}
	return a.RetryAfter > b.RetryAfter
}
