package core

import (
	"cmp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Outcome is what became of one decision, as a metrics adapter labels it;
// every decision has exactly one. The zero value is OutcomeAllowed.
type Outcome uint8

// The outcomes, in the order a TallySnapshot lists them.
const (
	// OutcomeAllowed: allowed by every enforced tier, and no tier in
	// shadow mode would have denied it.
	OutcomeAllowed Outcome = iota
	// OutcomeDenied: an enforced tier denied it.
	OutcomeDenied
	// OutcomeDegraded: the store failed and the failure mode decided
	// (FailOpen, FailFallback); Decision.Degraded.
	OutcomeDegraded
	// OutcomeShadowDenied: allowed, but a tier in shadow mode would have
	// denied it; Decision.ShadowDenied.
	OutcomeShadowDenied
	// OutcomeError: returned with an error (bad input, the caller's
	// context ending, a store failure under FailClosed); Event.Err.
	OutcomeError

	numOutcomes = int(OutcomeError) + 1
)

var outcomeNames = [numOutcomes]string{"allowed", "denied", "degraded", "shadow_denied", "error"}

// String returns the outcome's label value: "allowed", "denied",
// "degraded", "shadow_denied" or "error"; "Outcome(n)" for any other n.
func (o Outcome) String() string {
	if int(o) < numOutcomes {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// errorKinds are the values ErrorKind returns for a non-nil error, in the
// order a TallySnapshot lists them.
var errorKinds = [...]string{"breaker_open", "timeout", "canceled", "partial", "invalid_input", "not_constructed", "unavailable"}

// kindIndex returns the index of kind in errorKinds, -1 if it is not
// there: a switch, which compiles to a few length and byte comparisons.
func kindIndex(kind string) int {
	switch kind {
	case "breaker_open":
		return 0
	case "timeout":
		return 1
	case "canceled":
		return 2
	case "partial":
		return 3
	case "invalid_input":
		return 4
	case "not_constructed":
		return 5
	case "unavailable":
		return 6
	}
	return -1
}

// The counters are striped: each decision adds to one stripe, and a
// snapshot sums the stripes. One counter shared by every core would be
// one cache line bouncing between them on every decision; a few stripes
// per core keep most additions on a line no other core is writing.
// Stripes are padded to whole cache lines (128 bytes covers the
// adjacent-line prefetch of x86 as well as 64-byte lines).
const (
	lineSize   = 128
	maxStripes = 128
	// maxRulePointers bounds the cache of rules by pointer: a policy
	// replaced at run time brings new pointers, and the cache starts afresh
	// when it holds this many, rather than keeping dead policies alive.
	maxRulePointers = 1024
)

// tallyStripe counts the decisions of one stripe that no rule names.
type tallyStripe struct {
	n    [numOutcomes][2]atomic.Uint64 // by outcome, and not allowed (0) or allowed (1)
	errs [len(errorKinds)]atomic.Uint64
	_    [2*lineSize - (numOutcomes*2+len(errorKinds))*8]byte
}

// The outcomes counted by rule, and their slot in a ruleStripe.
const (
	slotDenied       = iota // OutcomeDenied, not allowed
	slotShadowDenied        // OutcomeShadowDenied, allowed
	slotDegraded            // OutcomeDegraded, not allowed: the fallback store denied
	numSlots
)

var slotOutcome = [numSlots]Outcome{OutcomeDenied, OutcomeShadowDenied, OutcomeDegraded}

type ruleStripe struct {
	n [numSlots]atomic.Uint64
	_ [lineSize/2 - numSlots*8]byte
}

// ruleID is what labels a rule: its name and scope. Rules of two policies
// with the same name and scope share their counters.
type ruleID struct {
	name  string
	scope Scope
}

type ruleTally struct {
	id      ruleID
	stripes []ruleStripe
}

// Tally counts decisions by outcome, by denying rule and scope, and by
// error kind, for metrics adapters (adapters/prometheus, adapters/otel) to
// export: Record counts an Event from an Observer, cheaply enough to run
// on every decision, and Snapshot sums the counts when the metrics are
// read.
//
// The counters are striped: Record adds to one of several padded
// counters, chosen by the calling goroutine, so that goroutines on
// different cores seldom write the same cache line, and Snapshot adds the
// stripes up. The counters of a denying rule are found through a
// copy-on-write map keyed by *Rule (bounded; it starts afresh past 1024
// pointers): a policy replaced with SetPolicy costs one copy of the map
// on each rule's first denial, and a rule keeps its counts across
// policies as long as its name and scope stay.
//
// Make a Tally with NewTally. The zero value (and a nil *Tally) counts
// nothing: Record does nothing and Snapshot reports zeros. A Tally is safe
// for concurrent use; counts only rise, and wrap past 2^64.
type Tally struct {
	mask    uint32
	stripes []tallyStripe
	rules   atomic.Pointer[map[*Rule]*ruleTally] // copy on write

	mu     sync.Mutex
	byID   map[ruleID]*ruleTally // every rule counted, for snapshots
	others map[string]uint64     // error kinds ErrorKind may add later
}

// NewTally returns an empty Tally with four stripes per GOMAXPROCS
// (rounded up to a power of two, at most 128), so that goroutines running
// at once seldom share one.
func NewTally() *Tally {
	n := 1
	for n < 4*runtime.GOMAXPROCS(0) && n < maxStripes {
		n *= 2
	}
	t := &Tally{mask: uint32(n - 1), stripes: make([]tallyStripe, n), byID: make(map[ruleID]*ruleTally)}
	empty := make(map[*Rule]*ruleTally)
	t.rules.Store(&empty)
	return t
}

// stripeOf returns the stripe of the calling goroutine, from the address
// of a local variable: it lies in the goroutine's own stack, so that a
// goroutine keeps to one stripe while goroutines spread over them, for a
// few multiplications where a random number costs several times more. The
// address is only hashed, never dereferenced or kept; a stack that grows
// moves, and the goroutine then writes to another stripe. Any stripe
// counts correctly: the choice only spreads the writes.
func (t *Tally) stripeOf() uint32 {
	var x byte
	a := uint64(uintptr(unsafe.Pointer(&x))) >> 11 // 2KiB, the smallest goroutine stack
	// MurmurHash3's 64-bit finalizer: stacks lie at regular offsets, which
	// every bit of the result must forget.
	a ^= a >> 33
	a *= 0xff51afd7ed558ccd
	a ^= a >> 33
	a *= 0xc4ceb9fe1a85ec53
	a ^= a >> 33
	return uint32(a) & t.mask
}

// zeroDecision is read, never written: a local zero Decision would cost
// clearing its few hundred bytes on every call.
var zeroDecision Decision

// Record counts the decision of e, once, with one outcome:
//
//   - OutcomeError when e.Err is not nil;
//   - else OutcomeDegraded when Decision.Degraded (the fallback store's
//     denial is counted under its denying tier's rule);
//   - else OutcomeShadowDenied when Decision.ShadowDenied, under the
//     shadow tier that would have denied it (of several, the one with the
//     longest RetryAfter, as a denial is decided);
//   - else OutcomeAllowed when Decision.Allowed;
//   - else OutcomeDenied, under the deciding tier (Decision.Rule).
//
// A decision whose e.Err, or else Decision.Err, is not nil is also
// counted by ErrorKind. An event without a Decision counts as the zero
// Decision; a nil e is ignored.
//
// Record adds one to one striped counter, two for a failure. It allocates
// nothing itself, except to make the counters of a rule the first time it
// denies (and once per rule after a policy change) and to count an error
// kind ErrorKind does not name today; naming a failure's kind costs what
// ErrorKind costs. It is safe for concurrent use; call it from an
// Observer:
//
//	t := core.NewTally()
//	limiter, err := core.NewLimiter(policy, core.WithObserver(func(_ context.Context, e *core.Event) { t.Record(e) }))
func (t *Tally) Record(e *Event) {
	if e != nil {
		t.record(e.Decision, e.Err)
	}
}

// record is Record of a decision d (nil: the zero Decision) returned with
// err. It takes them apart, not in an Event, so that the limiter's call
// keeps its decision on the stack: what record keeps of d is a rule it
// points to, and the compiler tracks that only one level down.
func (t *Tally) record(d *Decision, err error) {
	if t == nil || len(t.stripes) == 0 {
		return
	}
	if d == nil {
		d = &zeroDecision // the limiter always gives one: count as its zero value
	}
	i := t.stripeOf()
	s := &t.stripes[i]
	failure := err
	if failure == nil {
		failure = d.Err
	}
	if failure != nil {
		kind := ErrorKind(failure)
		if k := kindIndex(kind); k >= 0 {
			s.errs[k].Add(1)
		} else {
			t.other(kind)
		}
	}
	var out Outcome
	switch {
	case err != nil:
		out = OutcomeError
	case d.Degraded:
		out = OutcomeDegraded
	case d.ShadowDenied:
		out = OutcomeShadowDenied
	case d.Allowed:
		s.n[OutcomeAllowed][1].Add(1)
		return
	default:
		out = OutcomeDenied
	}
	if out == OutcomeShadowDenied || !d.Allowed && (out == OutcomeDenied || out == OutcomeDegraded) {
		if r := denying(d, out == OutcomeShadowDenied); r != nil {
			slot := slotDenied
			switch out {
			case OutcomeShadowDenied:
				slot = slotShadowDenied
			case OutcomeDegraded:
				slot = slotDegraded
			}
			t.rule(r).stripes[i].n[slot].Add(1)
			return
		}
	}
	allowed := 0
	if d.Allowed {
		allowed = 1
	}
	s.n[out][allowed].Add(1)
}

// denying returns the rule of d's denying tier: the shadow tier with the
// longest RetryAfter for a shadow denial (as an enforced denial is decided),
// otherwise the deciding tier, d.Rule. It returns nil if there is none.
func denying(d *Decision, shadow bool) *Rule {
	var best TierState
	for j := range d.NumTiers() {
		ts := d.TierAt(j)
		if ts.Rule == nil || ts.Allowed {
			continue
		}
		if !shadow {
			if ts.Rule.Name == d.Rule {
				return ts.Rule
			}
			continue
		}
		if ts.Shadow && (best.Rule == nil || ts.RetryAfter > best.RetryAfter) {
			best = ts
		}
	}
	return best.Rule
}

// rule returns the counters of r, made on first sight.
func (t *Tally) rule(r *Rule) *ruleTally {
	if rt, ok := (*t.rules.Load())[r]; ok {
		return rt
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.rules.Load()
	if rt, ok := old[r]; ok {
		return rt
	}
	id := ruleID{r.Name, r.Scope}
	rt := t.byID[id]
	if rt == nil {
		rt = &ruleTally{id: id, stripes: make([]ruleStripe, len(t.stripes))}
		t.byID[id] = rt
	}
	var next map[*Rule]*ruleTally
	if len(old) >= maxRulePointers {
		next = map[*Rule]*ruleTally{r: rt}
	} else {
		next = make(map[*Rule]*ruleTally, len(old)+1)
		for k, v := range old {
			next[k] = v
		}
		next[r] = rt
	}
	t.rules.Store(&next)
	return rt
}

// other counts an error kind that errorKinds lacks, under the lock: a
// kind ErrorKind may add later, rare until errorKinds names it.
func (t *Tally) other(kind string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.others == nil {
		t.others = make(map[string]uint64)
	}
	t.others[kind]++
}

// TallySnapshot is what a Tally counted, summed over its stripes. Each
// counter is read once, atomically, but not all at the same instant: a
// snapshot taken while decisions are recorded may count a decision in one
// field and not yet in another, and the next snapshot counts it in both.
type TallySnapshot struct {
	// Requests counts every decision: Allowed + Rejected.
	Requests uint64
	// Allowed counts the decisions that let the request go ahead
	// (Decision.Allowed): allowed, shadow-denied, and allowed by the
	// failure mode while the store failed.
	Allowed uint64
	// Rejected counts the decisions that did not: denials (the fallback
	// store's included), fail-closed refusals and errors.
	Rejected uint64
	// Decisions counts the decisions by outcome and denying rule; every
	// decision is in exactly one element. The outcomes without a rule come
	// first, in Outcome order: OutcomeAllowed, OutcomeDegraded and
	// OutcomeError always (at 0 if none), OutcomeDenied and
	// OutcomeShadowDenied only when some decision had no denying tier to
	// name. Then come the rules' denials, sorted by rule name, scope and
	// outcome, each present once counted. Never nil.
	Decisions []OutcomeCount
	// Errors counts the decisions with an error, or with a Decision.Err,
	// by ErrorKind: every kind ErrorKind names, always, in the order of
	// its documentation ("breaker_open", "timeout", "canceled", "partial",
	// "invalid_input", "not_constructed", "unavailable"), then any other
	// kind counted, sorted.
	Errors []ErrorKindCount
}

// OutcomeCount is one count of a TallySnapshot's Decisions: the decisions
// of Outcome whose denying tier has rule Rule and scope Scope. Rule and
// Scope are empty for OutcomeAllowed and OutcomeError, and for the other
// outcomes when no tier denied (a degraded decision allowed by the
// failure mode).
type OutcomeCount struct {
	Outcome Outcome
	Rule    string
	Scope   Scope
	Count   uint64
}

// ErrorKindCount is one count of a TallySnapshot's Errors: the decisions
// whose error ErrorKind names Kind.
type ErrorKindCount struct {
	Kind  string
	Count uint64
}

// Snapshot returns the counts now. It allocates the snapshot and takes a
// lock shared with the first denial of each rule, never held while
// counting: call it when the metrics are read, not per decision. It is
// safe for concurrent use, with Record too.
func (t *Tally) Snapshot() TallySnapshot {
	var n [numOutcomes][2]uint64 // without a rule
	var errs [len(errorKinds)]uint64
	var others []ErrorKindCount
	var rules []*ruleTally
	if t != nil {
		for i := range t.stripes {
			st := &t.stripes[i]
			for o := range st.n {
				n[o][0] += st.n[o][0].Load()
				n[o][1] += st.n[o][1].Load()
			}
			for k := range st.errs {
				errs[k] += st.errs[k].Load()
			}
		}
		t.mu.Lock()
		rules = make([]*ruleTally, 0, len(t.byID))
		for _, rt := range t.byID {
			rules = append(rules, rt)
		}
		for kind, v := range t.others {
			others = append(others, ErrorKindCount{Kind: kind, Count: v})
		}
		t.mu.Unlock()
	}

	var s TallySnapshot
	s.Decisions = make([]OutcomeCount, 0, numOutcomes+numSlots*len(rules))
	for o := range n {
		s.Rejected += n[o][0]
		s.Allowed += n[o][1]
		v := n[o][0] + n[o][1]
		out := Outcome(o)
		// The outcomes that need no rule are always there; the others
		// without a rule only if a decision lacked its denying tier.
		if v > 0 || out == OutcomeAllowed || out == OutcomeDegraded || out == OutcomeError {
			s.Decisions = append(s.Decisions, OutcomeCount{Outcome: out, Count: v})
		}
	}
	start := len(s.Decisions)
	for _, rt := range rules {
		var sums [numSlots]uint64
		for i := range rt.stripes {
			for j := range sums {
				sums[j] += rt.stripes[i].n[j].Load()
			}
		}
		for slot, v := range sums {
			if slot == slotShadowDenied {
				s.Allowed += v
			} else {
				s.Rejected += v
			}
			if v > 0 {
				s.Decisions = append(s.Decisions, OutcomeCount{Outcome: slotOutcome[slot], Rule: rt.id.name, Scope: rt.id.scope, Count: v})
			}
		}
	}
	slices.SortFunc(s.Decisions[start:], func(a, b OutcomeCount) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Outcome, b.Outcome))
	})
	s.Requests = s.Allowed + s.Rejected

	s.Errors = make([]ErrorKindCount, 0, len(errorKinds)+len(others))
	for k, v := range errs {
		s.Errors = append(s.Errors, ErrorKindCount{Kind: errorKinds[k], Count: v})
	}
	slices.SortFunc(others, func(a, b ErrorKindCount) int { return cmp.Compare(a.Kind, b.Kind) })
	s.Errors = append(s.Errors, others...)
	return s
}
