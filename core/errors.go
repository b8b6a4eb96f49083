package core

import (
	"errors"
	"fmt"
)

// Configuration errors, returned (wrapped, naming the rule and the field, or
// the option) by NewPolicy, NewLimiter, NewMemoryStore and NewHeaderFormat.
// Match them with errors.Is.
var (
	// ErrInvalidRule: a rule is malformed (no name, bad name, no limit).
	ErrInvalidRule = errors.New("ratelimit: invalid rule")
	// ErrInvalidRate: a rate is zero, negative, not finite or above 1e9/s.
	ErrInvalidRate = errors.New("ratelimit: invalid rate")
	// ErrInvalidBurst: a burst or window limit is below 1, too large, or
	// takes too long to refill.
	ErrInvalidBurst = errors.New("ratelimit: invalid burst")
	// ErrInvalidWindow: a window or a maximum wait is not positive or too long.
	ErrInvalidWindow = errors.New("ratelimit: invalid window")
	// ErrUnknownScope: a rule's scope is neither built in nor a Dimension.
	ErrUnknownScope = errors.New("ratelimit: unknown scope")
	// ErrDuplicateRule: two rules share a name on overlapping plans, so they
	// would share buckets.
	ErrDuplicateRule = errors.New("ratelimit: duplicate rule")
	// ErrInvalidOption: an option has a value that cannot work, an option
	// is nil (the error names the constructor and the option's position in
	// its arguments, counted from 0), or an option is given a nil argument
	// (the error names the option): a nil Store, Observer or Clock is
	// refused, never replaced by a default.
	ErrInvalidOption = errors.New("ratelimit: invalid option")
	// ErrInvalidPlan: a policy's rules name plans but it says nothing of
	// requests of no plan or an unknown one, or its default plan is not one
	// the rules name (see Plans).
	ErrInvalidPlan = errors.New("ratelimit: invalid plan")
	// ErrNotConstructed: a method was called on a Limiter or MemoryStore
	// that was not made by its constructor (a zero value, or a nil
	// pointer). The error names the type and the constructor to use.
	ErrNotConstructed = errors.New("ratelimit: not constructed")
)

// Request errors, returned by the Limiter and by stores for input that no
// configuration can make valid. Adapters hand them to their error handler.
var (
	// ErrInvalidKey: a bucket key is empty, longer than MaxKeyLen, or holds
	// control characters.
	ErrInvalidKey = errors.New("ratelimit: invalid key")
	// ErrInvalidCost: a cost is negative or above MaxCost.
	ErrInvalidCost = errors.New("ratelimit: invalid cost")
	// ErrInvalidTime: an explicit time is zero, before the Unix epoch or
	// after MaxTime().
	ErrInvalidTime = errors.New("ratelimit: invalid time")
	// ErrUnknownPlan: a request's plan is not one the policy's rules name
	// and the policy rejects unknown plans (Plans.RejectUnknown), or it has
	// no plan and the policy has no default. It wraps ErrInvalidKey: the
	// middlewares answer it as a key error, 400.
	ErrUnknownPlan = fmt.Errorf("%w: unknown plan", ErrInvalidKey)
	// ErrNilArgument: a method was given a nil pointer where it reads or
	// writes a value (Decide's request or decision).
	ErrNilArgument = errors.New("ratelimit: nil argument")
)

// Outcome errors.
var (
	// ErrUnavailable is returned, wrapping the store's error, when the store
	// fails and the limiter fails closed.
	ErrUnavailable = errors.New("ratelimit: store unavailable")
	// ErrBreakerOpen is wrapped by a *BreakerOpenError, the refusal of an
	// open Breaker, and so in Decision.Err (and, failing closed, in the
	// error wrapping ErrUnavailable) when a store's breaker kept it from
	// calling its backend.
	ErrBreakerOpen = errors.New("ratelimit: circuit breaker open")
	// ErrLimited is returned by Wait when the request cannot pass before the
	// context ends, or can never pass.
	ErrLimited = errors.New("ratelimit: limited")
)
