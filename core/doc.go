// Package core decides rate limits: the bucket math, multi-tier policies,
// decisions, the Store contract and the in-memory store. It imports only the
// standard library; framework middleware and Redis stores build on it.
//
// # Rules, policies, limiters
//
// A Rule is one tier: a name, a Scope (user, ip, endpoint, global or a
// Dimension), a Limit (algorithm and numbers), an optional Plan and a
// Disabled flag. NewPolicy validates a set of rules and reports any mistake
// as a *RuleError that names the rule and wraps a sentinel error
// (ErrInvalidRate, ErrInvalidBurst, ErrInvalidWindow, ErrUnknownScope,
// ErrDuplicateRule, ErrInvalidRule) for errors.Is.
//
// A Limiter checks a Request against every rule that applies to it. A rule
// applies when it is enabled, its plan is empty or equals Request.Plan, and
// the request carries an identity for its scope: an anonymous request (empty
// User) skips the per-user rules; global rules always apply. All applicable
// rules must allow the request, and a request denied by any tier consumes
// nothing from any tier. The Decision names the deciding tier: the denying
// one with the longest RetryAfter or, when allowed, the one with the least
// Remaining. Limiter.Decide makes the same decision as AllowN into a
// Decision the caller keeps (a middleware's, a hot loop's), without the
// copy a returned Decision costs.
//
// Limiter.SetPolicy replaces the policy without a restart. A middleware
// built on a Limiter registers a check with AddPolicyCheck, so that a policy
// it could not apply (a rule on a scope it has no key function for) is
// refused at reload as at construction, and the policy in force stays.
//
// Constructors return errors, never panic, and never substitute a default
// for a value that cannot work. A nil option, or a nil Store, Observer or
// Clock given to WithStore, WithObserver or WithClock, is an error wrapping
// ErrInvalidOption that names the constructor and the option's position, or
// the option. A Limiter or MemoryStore must come from its constructor: on a
// zero value or a nil pointer their methods return errors wrapping
// ErrNotConstructed (those without an error return give zero answers), and a
// zero HeaderFormat sets no headers.
//
// # Bucket math
//
// A token bucket has a rate r and a burst b. A new bucket is full, tokens
// refill continuously, tokens(t) = min(b, tokens(t0) + (t-t0)*r), and a
// request of cost c is allowed iff tokens(t) >= c, then consumes c. Cost 0
// reads without consuming; a cost above b can never pass and is denied with
// ReasonCostExceedsLimit and no retry time. The implementation is GCRA in
// integer nanoseconds: one theoretical arrival time per bucket, the interval
// between tokens 1/r rounded up to the nanosecond so that the rate is never
// exceeded. Decisions are exact at every nanosecond; the token bucket uses
// floating point only to rescale a bucket whose limit changed (below).
//
// Spans (a token bucket's fill time plus its MaxWait, a window) go up to
// MaxSpan, 400 days, so quarterly and yearly quotas fit. A limit whose span
// is longer than 100 days decides at microsecond resolution
// (Limit.Resolution): its interval between tokens is rounded up to the
// microsecond, it decides as at the time truncated to the microsecond, and
// its durations are whole microseconds. Every store decides such a limit
// exactly as Limit.Decide does.
//
// A rule or tenant whose limit changes keeps its buckets. A token bucket
// keeps the share of its burst it had: its debt (the time until it is full)
// is rescaled by the new fill time over the old, debt' = ceil(debt *
// tau'/tau), clamped to [0, tau'], and it refills at the old pace until a
// take under the new limit is admitted. A window keeps its count, to which
// the new limit applies, as long as its window length is unchanged; a window
// of another length, or another algorithm, starts afresh. See Limit for the
// details.
//
// Decision fields, for the deciding tier: Limit = b; Remaining = whole
// tokens left, never negative; ResetAfter = time until the bucket is full;
// RetryAfter (denied) = (c - tokens)/r, the exact wait until this cost can
// pass if nobody else consumes. Time moving backwards never creates tokens.
//
// The other algorithms (see Algorithm): fixed windows aligned to the Unix
// epoch; the sliding window counter, prev*(1-elapsed/W) + cur + c <= L,
// computed in float64 in a fixed order so that every store gets the same
// bits, with RetryAfter found by bisection so it is never early; the sliding
// log, exact over (t-W, t]; and Shaping, a token bucket that delays a request
// into its slot (Decision.Delay) for up to MaxWait instead of denying it,
// serving requests in arrival order.
//
// # Routes, plans and tenants
//
// A rule may be limited to routes (Rule.Routes, selectors parsed by
// ParseRoute: "GET /search", "/search", "POST", a gRPC method), to the
// requests a predicate accepts (Rule.When), and may take its limit per
// identity from a Lookup (a LimitTable, a LookupFunc), with Rule.Limit for
// identities it has none for. Every rule that applies to a request,
// whatever selects it, is decided in the same store call. A policy
// indexes its rules by route, and a LimitTable is a sharded map, so that
// the cost of a decision grows with neither the number of routes nor the
// number of tenants.
//
// A policy whose rules name plans says what a request of no plan, or of a
// plan no rule names, gets (NewPlanPolicy, Plans): the default plan's
// rules, or an error wrapping ErrUnknownPlan. NewPolicy refuses such rules
// without it, for those requests would silently skip every plan tier.
//
// # Stores
//
// A Store takes a cost from several buckets atomically, all or nothing, and
// reports each bucket's state. Stores never decide what a failure means: the
// Limiter's FailureMode does (FailOpen by default, FailClosed, or
// FailFallback to a private MemoryStore with the same rules), and a decision
// made under failure has Degraded set and Err holding the store's error.
// WithTimeout bounds each store call, a timeout counting as a failure; the
// caller's own context ending is not a failure, and AllowN returns its error.
// A store with failure domains keeps a Breaker per domain (the Redis stores:
// per node), so that one dead node stops costing its own keys a timeout
// each while every other key goes on as before: after N failures in a row
// the domain's calls fail at once with a *BreakerOpenError (wrapping
// ErrBreakerOpen) for a cooldown, the Retry-After when failing closed; then
// a single probe decides whether to close it again. A request whose tiers
// span a failed and a healthy domain gets a PartialError from the store, and
// the failure mode decides the failed tiers only (see FailureMode).
//
// MemoryStore is the embedded default: sharded, lock-free lookups with a
// lock per bucket, no allocation for existing keys, bounded, and reclaiming
// expired buckets incrementally.
//
// # Time
//
// Stores read their own clock unless a decision carries an explicit time
// (Limiter.AllowAt). The memory store reads the monotonic clock, or the
// Clock given with WithClock; tests use ManualClock.
package core
