package core

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// policyChecks are the checks a Limiter runs on every policy before it
// takes effect (see AddPolicyCheck).
type policyChecks struct {
	// mu serializes SetPolicy and AddPolicyCheck, so that the policy in
	// force has passed every check registered: a check registered while a
	// policy is being stored sees that policy. Decisions never take it.
	mu   sync.Mutex
	list []*policyCheck // in the order registered
}

// policyCheck is one registered check; its address identifies it for
// removal.
type policyCheck struct{ fn func(*Policy) error }

// AddPolicyCheck registers check, a condition every policy of l must meet:
// it is run at once against the policy in force, and against every policy
// given to SetPolicy later, which refuses a policy that fails it and keeps
// the one in force. A middleware built on l registers one so that a policy
// it could not apply (a rule on a scope it has no key for) is refused at
// reload as at construction; several middlewares on one limiter each
// register theirs, and a policy must pass them all.
//
// check is called with a non-nil policy, under a lock that SetPolicy,
// AddPolicyCheck and remove take, so checks never run concurrently on one
// limiter; it must be quick, must not block, and must not call those on l.
// An error it returns is reported as it is if it wraps ErrInvalidOption,
// and wrapped in one otherwise.
//
// If the policy in force fails check, check is not registered and its
// error is returned. remove unregisters check; calling it again does
// nothing. remove is never nil, even with an error. AddPolicyCheck fails
// with an error wrapping ErrInvalidOption for a nil check, and
// ErrNotConstructed for a Limiter not made by NewLimiter. It and remove are
// safe for concurrent use.
func (l *Limiter) AddPolicyCheck(check func(*Policy) error) (remove func(), err error) {
	remove = func() {}
	if !l.constructed() {
		return remove, errNotConstructed()
	}
	if check == nil {
		return remove, fmt.Errorf("%w: AddPolicyCheck: check is nil", ErrInvalidOption)
	}
	c := &l.checks
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := runCheck(check, l.policy.Load()); err != nil {
		return remove, err
	}
	pc := &policyCheck{fn: check}
	c.list = append(c.list, pc)
	var once atomic.Bool
	return func() {
		if once.Swap(true) {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if i := slices.Index(c.list, pc); i >= 0 {
			c.list = slices.Delete(c.list, i, i+1)
		}
	}, nil
}

// setPolicy stores p in cur if it passes every registered check; otherwise
// it returns their errors, joined, and cur keeps its policy.
func (c *policyChecks) setPolicy(cur *atomic.Pointer[Policy], p *Policy) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, pc := range c.list {
		if err := runCheck(pc.fn, p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	cur.Store(p)
	return nil
}

// runCheck runs check on p and returns its error wrapping ErrInvalidOption.
func runCheck(check func(*Policy) error, p *Policy) error {
	err := check(p)
	if err == nil || errors.Is(err, ErrInvalidOption) {
		return err
	}
	return fmt.Errorf("%w: policy refused by a check: %w", ErrInvalidOption, err)
}
