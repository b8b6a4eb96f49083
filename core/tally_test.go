package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tallyWant is a TallySnapshot as a test states it: the totals, the
// decisions in snapshot order, and the error kinds that are not zero.
type tallyWant struct {
	requests, allowed, rejected uint64
	decisions                   []OutcomeCount
	errors                      map[string]uint64
}

// tallyCheck fails unless s is exactly w: every kind ErrorKind names is
// in s.Errors, in order, at 0 unless w counts it.
func tallyCheck(t *testing.T, name string, s TallySnapshot, w tallyWant) {
	t.Helper()
	if s.Requests != w.requests || s.Allowed != w.allowed || s.Rejected != w.rejected {
		t.Errorf("%s: totals (requests, allowed, rejected) = (%d, %d, %d), want (%d, %d, %d)",
			name, s.Requests, s.Allowed, s.Rejected, w.requests, w.allowed, w.rejected)
	}
	if !slices.Equal(s.Decisions, w.decisions) {
		t.Errorf("%s: Decisions = %+v, want %+v", name, s.Decisions, w.decisions)
	}
	want := make([]ErrorKindCount, 0, len(errorKinds))
	for _, kind := range errorKinds {
		want = append(want, ErrorKindCount{kind, w.errors[kind]})
	}
	if !slices.Equal(s.Errors, want) {
		t.Errorf("%s: Errors = %+v, want %+v", name, s.Errors, want)
	}
}

// tallyLimiter returns a limiter whose observer records into tl.
func tallyLimiter(t *testing.T, tl *Tally, rules []Rule, opts ...Option) *Limiter {
	t.Helper()
	return newTestLimiter(t, append([]Option{WithObserver(func(_ context.Context, e *Event) { tl.Record(e) })}, opts...), rules...)
}

// tallyDecide makes n decisions of cost 1 for req at t0.
func tallyDecide(l *Limiter, req Request, n int) {
	for range n {
		l.AllowAt(context.Background(), t0, req, 1)
	}
}

// tallyDownStore fails every Take with errDown, or with the caller's
// context's error once it has ended.
type tallyDownStore struct{}

func (tallyDownStore) Take(ctx context.Context, _ *Take) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return errDown
}

var (
	tallyUser  = Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 2)}
	tallyAlice = Request{User: "alice", IP: "192.0.2.1"}
)

// tallyRuleless returns the outcomes without a rule, at the counts given: the three a snapshot
// always has, and denied or shadow denied when not zero.
func tallyRuleless(allowed, denied, degraded, shadow, errs uint64) []OutcomeCount {
	out := []OutcomeCount{{Outcome: OutcomeAllowed, Count: allowed}}
	if denied > 0 {
		out = append(out, OutcomeCount{Outcome: OutcomeDenied, Count: denied})
	}
	out = append(out, OutcomeCount{Outcome: OutcomeDegraded, Count: degraded})
	if shadow > 0 {
		out = append(out, OutcomeCount{Outcome: OutcomeShadowDenied, Count: shadow})
	}
	return append(out, OutcomeCount{Outcome: OutcomeError, Count: errs})
}

func TestTallyOutcomes(t *testing.T) {
	breakerDown := failingStore{fmt.Errorf("store: %w", ErrBreakerOpen)}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, tl *Tally)
		want tallyWant
	}{
		{
			name: "allowed and denied",
			run:  func(t *testing.T, tl *Tally) { tallyDecide(tallyLimiter(t, tl, []Rule{tallyUser}), tallyAlice, 3) },
			want: tallyWant{3, 2, 1, append(tallyRuleless(2, 0, 0, 0, 0),
				OutcomeCount{OutcomeDenied, "per-user", ScopeUser, 1}), nil},
		},
		{
			name: "no rule applies",
			run: func(t *testing.T, tl *Tally) {
				tallyDecide(tallyLimiter(t, tl, []Rule{tallyUser}), Request{IP: "192.0.2.1"}, 2)
			},
			want: tallyWant{2, 2, 0, tallyRuleless(2, 0, 0, 0, 0), nil},
		},
		{
			name: "shadow rule",
			run: func(t *testing.T, tl *Tally) {
				shadow := Rule{Name: "per-ip", Scope: ScopeIP, Shadow: true, Limit: TokenBucket(PerHour(1), 1)}
				tallyDecide(tallyLimiter(t, tl, []Rule{tallyUser, shadow}), tallyAlice, 4)
			},
			// per-ip would deny the second request on; per-user denies the
			// third and fourth, whatever per-ip says.
			want: tallyWant{4, 2, 2, append(tallyRuleless(1, 0, 0, 0, 0),
				OutcomeCount{OutcomeShadowDenied, "per-ip", ScopeIP, 1},
				OutcomeCount{OutcomeDenied, "per-user", ScopeUser, 2}), nil},
		},
		{
			name: "two shadow rules: the longer retry names the denial",
			run: func(t *testing.T, tl *Tally) {
				fast := Rule{Name: "fast", Scope: ScopeIP, Shadow: true, Limit: TokenBucket(PerSecond(10), 1)}
				slow := Rule{Name: "slow", Scope: ScopeUser, Shadow: true, Limit: TokenBucket(PerMinute(1), 1)}
				tallyDecide(tallyLimiter(t, tl, []Rule{fast, slow}), tallyAlice, 3)
			},
			want: tallyWant{3, 3, 0, append(tallyRuleless(1, 0, 0, 0, 0),
				OutcomeCount{OutcomeShadowDenied, "slow", ScopeUser, 2}), nil},
		},
		{
			name: "fail open",
			run: func(t *testing.T, tl *Tally) {
				tallyDecide(tallyLimiter(t, tl, []Rule{tallyUser}, WithStore(failingStore{errDown})), tallyAlice, 2)
			},
			want: tallyWant{2, 2, 0, tallyRuleless(0, 0, 2, 0, 0), map[string]uint64{"unavailable": 2}},
		},
		{
			name: "fail closed",
			run: func(t *testing.T, tl *Tally) {
				tallyDecide(tallyLimiter(t, tl, []Rule{tallyUser}, WithStore(failingStore{errDown}), WithFailureMode(FailClosed)), tallyAlice, 1)
			},
			want: tallyWant{1, 0, 1, tallyRuleless(0, 0, 0, 0, 1), map[string]uint64{"unavailable": 1}},
		},
		{
			name: "fallback denies",
			run: func(t *testing.T, tl *Tally) {
				tallyDecide(tallyLimiter(t, tl, []Rule{tallyUser}, WithStore(failingStore{errDown}), WithFailureMode(FailFallback)), tallyAlice, 3)
			},
			want: tallyWant{3, 2, 1, append(tallyRuleless(0, 0, 2, 0, 0),
				OutcomeCount{OutcomeDegraded, "per-user", ScopeUser, 1}), map[string]uint64{"unavailable": 3}},
		},
		{
			name: "breaker open",
			run: func(t *testing.T, tl *Tally) {
				tallyDecide(tallyLimiter(t, tl, []Rule{tallyUser}, WithStore(breakerDown)), tallyAlice, 2)
			},
			want: tallyWant{2, 2, 0, tallyRuleless(0, 0, 2, 0, 0), map[string]uint64{"breaker_open": 2}},
		},
		{
			name: "bad input and a canceled caller",
			run: func(t *testing.T, tl *Tally) {
				l := tallyLimiter(t, tl, []Rule{tallyUser}, WithStore(tallyDownStore{}))
				l.AllowAt(context.Background(), t0, tallyAlice, -1)
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				l.AllowAt(ctx, t0, tallyAlice, 1)
			},
			want: tallyWant{2, 0, 2, tallyRuleless(0, 0, 0, 0, 2), map[string]uint64{"invalid_input": 1, "canceled": 1}},
		},
		{
			name: "policy replaced: a rule keeps its counts",
			run: func(t *testing.T, tl *Tally) {
				l := tallyLimiter(t, tl, []Rule{tallyUser})
				tallyDecide(l, tallyAlice, 3)
				p, err := NewPolicy(Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
				if err != nil {
					t.Fatal(err)
				}
				if err := l.SetPolicy(p); err != nil {
					t.Fatal(err)
				}
				tallyDecide(l, tallyAlice, 2)
			},
			want: tallyWant{5, 2, 3, append(tallyRuleless(2, 0, 0, 0, 0),
				OutcomeCount{OutcomeDenied, "per-user", ScopeUser, 3}), nil},
		},
		{
			name: "rules sorted by name, then scope",
			run: func(t *testing.T, tl *Tally) {
				b := Rule{Name: "b", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)}
				aIP := Rule{Name: "a", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 1)}
				aUser := Rule{Name: "a", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)}
				tallyDecide(tallyLimiter(t, tl, []Rule{b}), tallyAlice, 2)
				tallyDecide(tallyLimiter(t, tl, []Rule{aUser}), tallyAlice, 2)
				tallyDecide(tallyLimiter(t, tl, []Rule{aIP}), tallyAlice, 2)
			},
			want: tallyWant{6, 3, 3, append(tallyRuleless(3, 0, 0, 0, 0),
				OutcomeCount{OutcomeDenied, "a", ScopeIP, 1},
				OutcomeCount{OutcomeDenied, "a", ScopeUser, 1},
				OutcomeCount{OutcomeDenied, "b", ScopeUser, 1}), nil},
		},
		{
			name: "events without a decision, and a nil event",
			run: func(t *testing.T, tl *Tally) {
				tl.Record(&Event{})                    // the zero Decision: a denial no tier names
				tl.Record(&Event{Err: ErrInvalidCost}) // an error returned without a decision
				tl.Record(nil)
			},
			want: tallyWant{2, 0, 2, tallyRuleless(0, 1, 0, 0, 1), map[string]uint64{"invalid_input": 1}},
		},
		{
			name: "a shadow denial whose tiers are gone",
			run: func(t *testing.T, tl *Tally) {
				tl.Record(&Event{Decision: &Decision{Allowed: true, ShadowDenied: true}})
			},
			want: tallyWant{1, 1, 0, tallyRuleless(0, 0, 0, 1, 0), nil},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tl := NewTally()
			tc.run(t, tl)
			tallyCheck(t, tc.name, tl.Snapshot(), tc.want)
		})
	}
}

// TestTallyZero: the zero Tally and a nil *Tally count nothing and report
// zeros, every outcome without a rule and every kind included.
func TestTallyZero(t *testing.T) {
	var zero Tally
	var null *Tally
	e := &Event{Decision: &Decision{Allowed: true}}
	for name, tl := range map[string]*Tally{"zero": &zero, "nil": null} {
		tl.Record(e)
		tallyCheck(t, name, tl.Snapshot(), tallyWant{decisions: tallyRuleless(0, 0, 0, 0, 0)})
	}
}

// TestTallyErrorKinds: every kind ErrorKind names for a non-nil error has
// its counter, and kindIndex agrees with errorKinds.
func TestTallyErrorKinds(t *testing.T) {
	for i, kind := range errorKinds {
		if got := kindIndex(kind); got != i {
			t.Errorf("kindIndex(%q) = %d, want %d", kind, got, i)
		}
	}
	if got := kindIndex("other"); got != -1 {
		t.Errorf(`kindIndex("other") = %d, want -1`, got)
	}
	for _, err := range []error{
		ErrBreakerOpen, context.DeadlineExceeded, context.Canceled, &PartialError{Failed: []int{0}, Err: errDown},
		ErrInvalidKey, ErrInvalidCost, ErrInvalidTime, ErrNotConstructed, errDown, ErrUnavailable,
	} {
		if kind := ErrorKind(err); kindIndex(kind) < 0 {
			t.Errorf("ErrorKind(%v) = %q, which has no counter", err, kind)
		}
	}
}

// TestTallyOtherKinds: a kind not in errorKinds is counted apart and
// listed after them, sorted.
func TestTallyOtherKinds(t *testing.T) {
	tl := NewTally()
	tl.other("zeta")
	tl.other("alpha")
	tl.other("zeta")
	got := tl.Snapshot().Errors
	want := []ErrorKindCount{{"alpha", 1}, {"zeta", 2}}
	if len(got) != len(errorKinds)+2 || !slices.Equal(got[len(errorKinds):], want) {
		t.Errorf("Errors = %+v, want the %d kinds then %+v", got, len(errorKinds), want)
	}
}

// TestTallyRuleCacheBound: past maxRulePointers rules the cache by
// pointer starts afresh, and rules of one name and scope still share one
// count.
func TestTallyRuleCacheBound(t *testing.T) {
	tl := NewTally()
	const n = maxRulePointers + 500
	for range n {
		r := &Rule{Name: "per-user", Scope: ScopeUser}
		d := &Decision{Rule: "per-user", Scope: ScopeUser, n: 1}
		d.tiers[0] = tierRec{rule: r}
		tl.Record(&Event{Decision: d})
		if size := len(*tl.rules.Load()); size > maxRulePointers {
			t.Fatalf("rule cache holds %d pointers, want at most %d", size, maxRulePointers)
		}
	}
	tallyCheck(t, "bound", tl.Snapshot(), tallyWant{n, 0, n, append(tallyRuleless(0, 0, 0, 0, 0),
		OutcomeCount{OutcomeDenied, "per-user", ScopeUser, n}), nil})
}

// tallyObserved returns a copy of each event l's decisions for reqs give: the
// events an observer sees, kept past the call.
func tallyObserved(tb testing.TB, rules []Rule, opts []Option, reqs ...Request) []*Event {
	tb.Helper()
	var seen []*Event
	keep := func(_ context.Context, e *Event) {
		c := *e
		if e.Request != nil {
			r := *e.Request
			c.Request = &r
		}
		if e.Decision != nil {
			d := *e.Decision
			c.Decision = &d
		}
		seen = append(seen, &c)
	}
	p, err := NewPolicy(rules...)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := NewLimiter(p, append([]Option{WithObserver(keep)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	for _, req := range reqs {
		l.AllowAt(context.Background(), t0, req, 1)
	}
	return seen
}

// tallyEvents are events of every outcome, from real decisions: allowed,
// denied, shadow denied, degraded (fail open), degraded and denied by the
// fallback store, and an error (fail closed).
func tallyEvents(t testing.TB) map[string]*Event {
	t.Helper()
	shadow := Rule{Name: "per-ip", Scope: ScopeIP, Shadow: true, Limit: TokenBucket(PerHour(1), 1)}
	one := Rule{Name: "per-user", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)}
	plain := tallyObserved(t, []Rule{one}, nil, tallyAlice, tallyAlice)
	shadowed := tallyObserved(t, []Rule{shadow}, nil, tallyAlice, tallyAlice)
	open := tallyObserved(t, []Rule{one}, []Option{WithStore(failingStore{errDown})}, tallyAlice)
	fallback := tallyObserved(t, []Rule{one}, []Option{WithStore(failingStore{errDown}), WithFailureMode(FailFallback)}, tallyAlice, tallyAlice)
	closed := tallyObserved(t, []Rule{one}, []Option{WithStore(failingStore{errDown}), WithFailureMode(FailClosed)}, tallyAlice)
	evs := map[string]*Event{
		"allowed": plain[0], "denied": plain[1], "shadow denied": shadowed[1],
		"degraded": open[0], "fallback denied": fallback[1], "error": closed[0],
	}
	for name, e := range evs {
		if e.Decision == nil {
			t.Fatalf("%s: the observer saw no decision", name)
		}
	}
	return evs
}

// TestTallyConcurrent: events recorded from many goroutines, while others
// take snapshots and rules are seen for the first time, are all counted,
// race free, and no snapshot goes backwards.
func TestTallyConcurrent(t *testing.T) {
	evs := tallyEvents(t)
	tl := NewTally()
	const goroutines, each = 16, 500
	var wg sync.WaitGroup
	var done atomic.Bool
	wg.Go(func() {
		var last uint64
		for !done.Load() {
			s := tl.Snapshot()
			if s.Requests < last {
				t.Errorf("Requests went from %d to %d", last, s.Requests)
				return
			}
			last = s.Requests
		}
	})
	var recorders sync.WaitGroup
	for g := range goroutines {
		recorders.Go(func() {
			// A rule of its own, seen first by this goroutine: its
			// counters are made while others count.
			own := &Rule{Name: "g" + strconv.Itoa(g), Scope: ScopeGlobal}
			d := &Decision{Rule: own.Name, Scope: own.Scope, n: 1}
			d.tiers[0] = tierRec{rule: own}
			mine := &Event{Decision: d}
			for range each {
				for _, e := range evs {
					tl.Record(e)
				}
				tl.Record(mine)
			}
		})
	}
	recorders.Wait()
	done.Store(true)
	wg.Wait()

	const n = goroutines * each
	rules := []OutcomeCount{
		{OutcomeShadowDenied, "per-ip", ScopeIP, n},
		{OutcomeDenied, "per-user", ScopeUser, n},
		{OutcomeDegraded, "per-user", ScopeUser, n},
	}
	for g := range goroutines {
		rules = append(rules, OutcomeCount{OutcomeDenied, "g" + strconv.Itoa(g), ScopeGlobal, each})
	}
	slices.SortFunc(rules, func(a, b OutcomeCount) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Scope, b.Scope), cmp.Compare(a.Outcome, b.Outcome))
	})
	want := tallyWant{
		requests: 7 * n, allowed: 3 * n, rejected: 4 * n,
		decisions: append(tallyRuleless(n, 0, n, 0, n), rules...),
		errors:    map[string]uint64{"unavailable": 3 * n},
	}
	tallyCheck(t, "concurrent", tl.Snapshot(), want)
}

// TestTallyAllocs: Record allocates nothing for any outcome once a rule's
// counters are made, beyond what ErrorKind allocates to name a failure's
// kind (its errors.As for a *PartialError costs one allocation for an error
// that is not one of its sentinels). The race detector's runtime may
// allocate on its own, so under -race the counts are only logged; make
// test runs the Allocs tests of core without it too.
func TestTallyAllocs(t *testing.T) {
	evs := tallyEvents(t)
	tl := NewTally()
	for _, name := range []string{"allowed", "denied", "shadow denied", "degraded", "fallback denied", "error"} {
		e := evs[name]
		tl.Record(e) // make the rule's counters
		got := testing.AllocsPerRun(1000, func() { tl.Record(e) })
		switch {
		case got == 0:
		case raceEnabled:
			t.Logf("%s: Record makes %v allocations under the race detector; checked without it", name, got)
		default:
			t.Errorf("%s: Record makes %v allocations, want 0", name, got)
		}
	}
	if s := tl.Snapshot(); s.Requests != 6*1002 {
		t.Errorf("Requests = %d, want %d", s.Requests, 6*1002)
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[Outcome]string{
		OutcomeAllowed: "allowed", OutcomeDenied: "denied", OutcomeDegraded: "degraded",
		OutcomeShadowDenied: "shadow_denied", OutcomeError: "error", Outcome(9): "Outcome(9)",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", uint8(o), got, want)
		}
	}
}

// BenchmarkTallyRecord measures Record on events of each outcome, serial
// and parallel.
func BenchmarkTallyRecord(b *testing.B) {
	evs := tallyEvents(b)
	tl := NewTally()
	for _, name := range []string{"allowed", "denied", "shadow denied", "degraded", "error"} {
		e := evs[name]
		b.Run(name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tl.Record(e)
			}
		})
		b.Run(name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tl.Record(e)
				}
			})
		})
	}
}

// TestWithTally: a tally given with WithTally counts what the same tally
// counts from an Observer, the latency function gets every timed decision
// with its context, and observers still run.
func TestWithTally(t *testing.T) {
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "mine")
	rules := []Rule{
		{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 2)},
		{Name: "g", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 100), Shadow: true},
	}
	direct, observed := NewTally(), NewTally()
	var timed, seen int
	l := newTestLimiter(t, []Option{
		WithTally(direct, func(c context.Context, d time.Duration) {
			if c.Value(ctxKey{}) != "mine" || d <= 0 {
				t.Errorf("latency(%v, %v): want the decision's context and a positive time", c, d)
			}
			timed++
		}),
		WithObserver(func(_ context.Context, e *Event) { observed.Record(e); seen++ }),
		WithLatencySampling(1),
	}, rules...)
	for _, req := range []Request{{User: "a"}, {User: "a"}, {User: "a"}, {User: "b"}, {}} {
		l.Allow(ctx, req)
	}
	if _, err := l.AllowN(ctx, Request{User: "a"}, -1); err == nil {
		t.Fatal("AllowN(-1): no error")
	}
	got, want := direct.Snapshot(), observed.Snapshot()
	if got.Requests != 6 || got.Allowed != want.Allowed || got.Rejected != want.Rejected || !slices.Equal(got.Decisions, want.Decisions) {
		t.Errorf("WithTally counted %+v, the observer %+v", got, want)
	}
	if timed != 6 || seen != 6 {
		t.Errorf("latency called %d times, observer %d, want 6 each", timed, seen)
	}
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"nil", []Option{WithTally(nil, nil)}},
		{"twice", []Option{WithTally(NewTally(), nil), WithTally(NewTally(), nil)}},
	} {
		p, _ := NewPolicy(rules...)
		if _, err := NewLimiter(p, tc.opts...); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithTally") {
			t.Errorf("%s: NewLimiter error %v, want ErrInvalidOption naming WithTally", tc.name, err)
		}
	}
}

// TestWithTallyAllocs: counting with WithTally adds no allocation to a
// decision, timed or not; the decision stays on the caller's stack.
func TestWithTallyAllocs(t *testing.T) {
	tl := NewTally()
	l := newTestLimiter(t, []Option{WithTally(tl, func(context.Context, time.Duration) {}), WithLatencySampling(2)},
		Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1<<20), 1<<30)},
		Rule{Name: "d", Scope: ScopeIP, Limit: TokenBucket(PerDay(1), 1)})
	ctx := context.Background()
	for _, req := range []Request{{User: "alice"}, {User: "alice", IP: "192.0.2.1"}} {
		l.Allow(ctx, req)
		if got := testing.AllocsPerRun(1000, func() { l.Allow(ctx, req) }); got != 0 {
			t.Errorf("Allow(%+v) with WithTally makes %v allocations, want 0", req, got)
		}
	}
}

// TestWithDenials: the function gets each denying tier of a denial, shadow
// tiers included, with the request's identities, and nothing for allowed
// decisions; counting them adds no allocation.
func TestWithDenials(t *testing.T) {
	var got []Denial
	l := newTestLimiter(t, []Option{WithDenials(func(_ context.Context, v Denial) { got = append(got, v) })},
		Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)},
		Rule{Name: "ip", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 1), Shadow: true},
		Rule{Name: "g", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 100)})
	ctx := context.Background()
	req := Request{User: "alice", IP: "192.0.2.1", Endpoint: "GET /x"}
	l.Allow(ctx, req) // allowed: nothing
	if len(got) != 0 {
		t.Fatalf("an allowed decision reported %d denials", len(got))
	}
	d, _ := l.Allow(ctx, req)
	if d.Allowed || len(got) != 2 {
		t.Fatalf("second Allow: allowed %v, %d denials, want a denial by u and by the shadow tier ip", d.Allowed, len(got))
	}
	if v := got[0]; v.Rule.Name != "u" || v.Identity != "alice" || v.Shadow || v.User != "alice" || v.IP != "192.0.2.1" || v.Endpoint != "GET /x" || !v.At.Equal(d.At) || v.Remaining != 0 || v.Limit.Burst() != 1 {
		t.Errorf("first denial %+v", v)
	}
	if v := got[1]; v.Rule.Name != "ip" || v.Identity != "192.0.2.1" || !v.Shadow {
		t.Errorf("second denial %+v, want the shadow tier ip", v)
	}
	got = got[:0]
	l.Allow(ctx, Request{User: "bob", IP: "192.0.2.1"}) // only the shadow tier denies: allowed
	if len(got) != 1 || !got[0].Shadow {
		t.Errorf("a shadow denial reported %+v, want the shadow tier", got)
	}
	for _, opts := range [][]Option{{WithDenials(nil)}, {WithDenials(func(context.Context, Denial) {}), WithDenials(func(context.Context, Denial) {})}} {
		p, _ := NewPolicy(Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
		if _, err := NewLimiter(p, opts...); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithDenials") {
			t.Errorf("NewLimiter error %v, want ErrInvalidOption naming WithDenials", err)
		}
	}
}

// TestWithGatedDenials: while the gate is shut, a denied decision makes no
// Denial and its denying tiers (shadow tiers included) are counted in
// Dropped; open, they are handed over; allowed decisions touch neither.
func TestWithGatedDenials(t *testing.T) {
	gate := NewDenialGate()
	var got []string
	l := newTestLimiter(t, []Option{WithGatedDenials(gate,
		func(_ context.Context, v Denial) { got = append(got, v.Rule.Name) })},
		Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)},
		Rule{Name: "ip", Scope: ScopeIP, Limit: TokenBucket(PerHour(1), 1), Shadow: true},
		Rule{Name: "g", Scope: ScopeGlobal, Limit: TokenBucket(PerHour(1), 100)})
	ctx := context.Background()
	req := Request{User: "alice", IP: "192.0.2.1"}
	gate.Shut()
	l.Allow(ctx, req) // allowed: nothing counted
	if gate.Dropped() != 0 {
		t.Errorf("an allowed decision counted %d dropped", gate.Dropped())
	}
	gate.Open()
	l.Allow(ctx, req) // u and the shadow ip deny
	gate.Shut()
	if !gate.IsShut() {
		t.Error("IsShut = false after Shut")
	}
	l.Allow(ctx, req) // held back: two tiers counted
	gate.Drop(3)      // the owner's own
	if !slices.Equal(got, []string{"u", "ip"}) || gate.Dropped() != 5 {
		t.Errorf("deny got %v, Dropped %d; want [u ip] and 5", got, gate.Dropped())
	}
	p, _ := NewPolicy(Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
	for _, opts := range [][]Option{
		{WithGatedDenials(nil, func(context.Context, Denial) {})},
		{WithGatedDenials(&DenialGate{}, func(context.Context, Denial) {})},
		{WithGatedDenials(NewDenialGate(), nil)},
		{WithDenials(func(context.Context, Denial) {}), WithGatedDenials(NewDenialGate(), func(context.Context, Denial) {})},
	} {
		if _, err := NewLimiter(p, opts...); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithGatedDenials") {
			t.Errorf("NewLimiter error %v, want ErrInvalidOption naming WithGatedDenials", err)
		}
	}
}

// TestDenialGateConcurrent: Drop from many goroutines at once loses no
// count, and a gate shut and opened meanwhile never loses a denial: each
// is handed over or counted.
func TestDenialGateConcurrent(t *testing.T) {
	gate := NewDenialGate()
	var handed atomic.Int64
	l := newTestLimiter(t, []Option{WithGatedDenials(gate, func(context.Context, Denial) { handed.Add(1) })},
		Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerHour(1), 1)})
	ctx := context.Background()
	const goroutines, each = 8, 2000
	for g := range goroutines {
		l.Allow(ctx, Request{User: fmt.Sprint("user-", g)}) // the one allowed
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				gate.Shut()
				runtime.Gosched()
				gate.Open()
			}
		}
	}()
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				l.Allow(ctx, Request{User: fmt.Sprint("user-", g)})
			}
		})
	}
	wg.Wait()
	close(stop)
	if got := handed.Load() + gate.Dropped(); got != goroutines*each {
		t.Errorf("handed over %d + dropped %d = %d, want %d denials", handed.Load(), gate.Dropped(), got, goroutines*each)
	}
}

// TestWithDenialsAllocs: reporting denials allocates nothing.
func TestWithDenialsAllocs(t *testing.T) {
	var n int
	l := newTestLimiter(t, []Option{WithDenials(func(_ context.Context, v Denial) { n += len(v.Identity) })},
		Rule{Name: "u", Scope: ScopeUser, Limit: TokenBucket(PerDay(1), 1)})
	ctx := context.Background()
	req := Request{User: "alice"}
	l.Allow(ctx, req)
	if got := testing.AllocsPerRun(1000, func() { l.Allow(ctx, req) }); got != 0 {
		t.Errorf("Allow with WithDenials makes %v allocations on a denial, want 0", got)
	}
	if n == 0 {
		t.Error("no denial reported")
	}
}
