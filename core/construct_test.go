package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// noPanic runs f and fails t, naming what was called, if f panics.
func noPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v", what, r)
		}
	}()
	f()
}

// checkOptionError asserts that err wraps ErrInvalidOption, starts with the
// package name and holds every piece of want.
func checkOptionError(t *testing.T, call string, err error, want ...string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("%s = %v, want an error wrapping ErrInvalidOption", call, err)
	}
	if !strings.HasPrefix(err.Error(), "ratelimit: ") {
		t.Errorf("%s: error %q does not start with the package name", call, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not say %q", call, err, w)
		}
	}
}

// nilStore is a Store whose nil pointer would fail on its first call.
type nilStore struct{ n int }

func (s *nilStore) Take(context.Context, *Take) error { s.n++; return nil }

func TestNilOptions(t *testing.T) {
	p, err := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() (any, error)
		want string // the whole message
	}{
		{"NewLimiter first", func() (any, error) { return NewLimiter(p, nil) },
			"ratelimit: invalid option: NewLimiter: option 0 is nil"},
		{"NewLimiter third", func() (any, error) {
			return NewLimiter(p, WithFailureMode(FailClosed), WithTimeout(time.Second), nil)
		}, "ratelimit: invalid option: NewLimiter: option 2 is nil"},
		{"NewMemoryStore first", func() (any, error) { return NewMemoryStore(nil) },
			"ratelimit: invalid option: NewMemoryStore: option 0 is nil"},
		{"NewMemoryStore second", func() (any, error) { return NewMemoryStore(WithShards(1), nil, WithMaxKeys(10)) },
			"ratelimit: invalid option: NewMemoryStore: option 1 is nil"},
		{"NewHeaderFormat first", func() (any, error) { return NewHeaderFormat(nil) },
			"ratelimit: invalid option: NewHeaderFormat: option 0 is nil"},
		{"NewHeaderFormat third", func() (any, error) {
			return NewHeaderFormat(WithXRateLimit(false), WithRetryAfter(true), nil)
		}, "ratelimit: invalid option: NewHeaderFormat: option 2 is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				v   any
				err error
			)
			noPanic(t, tc.name, func() { v, err = tc.call() })
			checkOptionError(t, tc.name, err)
			if err.Error() != tc.want {
				t.Errorf("error = %q, want %q", err, tc.want)
			}
			if rv := reflect.ValueOf(v); !rv.IsNil() {
				t.Errorf("result = %v, want nil with the error", v)
			}
		})
	}
}

func TestNilOptionArguments(t *testing.T) {
	p, err := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	if err != nil {
		t.Fatal(err)
	}
	limiter := func(opts ...Option) func() (any, error) {
		return func() (any, error) { return NewLimiter(p, opts...) }
	}
	memory := func(opts ...MemoryOption) func() (any, error) {
		return func() (any, error) { return NewMemoryStore(opts...) }
	}
	for _, tc := range []struct {
		name string
		call func() (any, error)
		want []string // in the message; none: accepted
	}{
		{"nil policy", func() (any, error) { return NewLimiter(nil) }, []string{"NewLimiter: policy is nil"}},
		{"WithStore(nil)", limiter(WithStore(nil)), []string{"WithStore: store is nil"}},
		{"WithStore nil MemoryStore", limiter(WithStore((*MemoryStore)(nil))), []string{"WithStore: store is nil"}},
		{"WithStore nil pointer store", limiter(WithStore((*nilStore)(nil))), []string{"WithStore: store is nil"}},
		{"WithStore zero MemoryStore", limiter(WithStore(&MemoryStore{})), []string{"WithStore: MemoryStore not made by NewMemoryStore"}},
		{"WithObserver(nil)", limiter(WithObserver(nil)), []string{"WithObserver: observer is nil"}},
		{"WithFailureMode unknown", limiter(WithFailureMode(FailureMode(9))), []string{"WithFailureMode: unknown failure mode 9"}},
		{"WithClock(nil)", memory(WithClock(nil)), []string{"WithClock: clock is nil"}},
		{"WithClock nil ManualClock", memory(WithClock((*ManualClock)(nil))), []string{"WithClock: clock is nil"}},
		{"WithMaxKeys(0)", memory(WithMaxKeys(0)), []string{"WithMaxKeys: max keys must be >= 1, got 0"}},
		{"WithShards(0)", memory(WithShards(0)), []string{"WithShards: shards must be between 1 and 65536, got 0"}},
		{"WithReclaimDelay(-1s)", memory(WithReclaimDelay(-time.Second)), []string{"WithReclaimDelay: reclaim delay must be between 0 and"}},
		{"every mistake at once", func() (any, error) { return NewLimiter(nil, nil, WithStore(nil), WithObserver(nil)) },
			[]string{"NewLimiter: option 0 is nil", "WithStore: store is nil", "WithObserver: observer is nil", "NewLimiter: policy is nil"}},
		// What still works.
		{"WithStore a store", limiter(WithStore(&nilStore{})), nil},
		{"WithStore a MemoryStore", limiter(WithStore(mustMemory(t))), nil},
		{"WithObserver a func", limiter(WithObserver(func(context.Context, *Event) {})), nil},
		{"WithClock a ManualClock", memory(WithClock(NewManualClock(t0))), nil},
		{"no options", limiter(), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				v   any
				err error
			)
			noPanic(t, tc.name, func() { v, err = tc.call() })
			if tc.want == nil {
				if err != nil || reflect.ValueOf(v).IsNil() {
					t.Fatalf("%s = %v, %v; want accepted", tc.name, v, err)
				}
				return
			}
			checkOptionError(t, tc.name, err, tc.want...)
			if !reflect.ValueOf(v).IsNil() {
				t.Errorf("result = %v, want nil with the error", v)
			}
		})
	}
}

func mustMemory(t *testing.T, opts ...MemoryOption) *MemoryStore {
	t.Helper()
	s, err := NewMemoryStore(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// methodNames returns the exported method names of v's type, sorted.
func methodNames(v any) []string {
	typ := reflect.TypeOf(v)
	var names []string
	for i := range typ.NumMethod() {
		names = append(names, typ.Method(i).Name)
	}
	return names
}

// checkCovered fails t unless calls has a case for every exported method of
// v's type, so that a method added later is added here too.
func checkCovered[T any](t *testing.T, v any, calls map[string]T) {
	t.Helper()
	for _, m := range methodNames(v) {
		if _, ok := calls[m]; !ok {
			t.Errorf("%T.%s is not exercised on a zero value: add it to the table", v, m)
		}
	}
}

func TestZeroLimiter(t *testing.T) {
	ctx := context.Background()
	req := Request{User: "u"}
	p, err := NewPolicy()
	if err != nil {
		t.Fatal(err)
	}
	// Every method of a Limiter; those with an error return report it.
	calls := map[string]func(l *Limiter) error{
		"Allow":  func(l *Limiter) error { _, err := l.Allow(ctx, req); return err },
		"AllowN": func(l *Limiter) error { _, err := l.AllowN(ctx, req, 1); return err },
		"AllowAt": func(l *Limiter) error {
			_, err := l.AllowAt(ctx, t0, req, 1)
			return err
		},
		"Decide": func(l *Limiter) error {
			r, d := req, Decision{Allowed: true}
			err := l.Decide(ctx, &r, 1, &d)
			if d.Allowed {
				return fmt.Errorf("Decide left an allowed decision, with error %v", err)
			}
			return err
		},
		"DecideUnder": func(l *Limiter) error {
			r, d := req, Decision{Allowed: true}
			err := l.DecideUnder(ctx, p, &r, 1, &d)
			if d.Allowed {
				return fmt.Errorf("DecideUnder left an allowed decision, with error %v", err)
			}
			return err
		},
		"Wait":      func(l *Limiter) error { _, err := l.Wait(ctx, req); return err },
		"WaitN":     func(l *Limiter) error { _, err := l.WaitN(ctx, req, 1); return err },
		"SetPolicy": func(l *Limiter) error { return l.SetPolicy(p) },
		"AddPolicyCheck": func(l *Limiter) error {
			remove, err := l.AddPolicyCheck(func(*Policy) error { return nil })
			remove() // never nil
			return err
		},
		"Policy": func(l *Limiter) error {
			if got := l.Policy(); got != nil {
				return fmt.Errorf("Policy() = %p, want nil", got)
			}
			return nil
		},
		"Logger": func(l *Limiter) error {
			if got := l.Logger(); got != nil {
				return fmt.Errorf("Logger() = %p, want nil", got)
			}
			return nil
		},
		"Observed": func(l *Limiter) error {
			if l.Observed() {
				return errors.New("Observed() = true, want false")
			}
			return nil
		},
		"Inspect":      func(l *Limiter) error { _, err := l.Inspect(ctx, req); return err },
		"Reset":        func(l *Limiter) error { return l.Reset(ctx, req) },
		"ReturnLeases": func(l *Limiter) error { return l.ReturnLeases(ctx) },
	}
	noError := map[string]bool{"Policy": true, "Logger": true, "Observed": true}
	checkCovered(t, &Limiter{}, calls)
	for _, lim := range []struct {
		name string
		l    *Limiter
	}{
		{"zero", &Limiter{}},
		{"nil", nil},
	} {
		for _, m := range slices.Sorted(maps.Keys(calls)) {
			t.Run(lim.name+"/"+m, func(t *testing.T) {
				var err error
				noPanic(t, m, func() { err = calls[m](lim.l) })
				if noError[m] {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if !errors.Is(err, ErrNotConstructed) {
					t.Fatalf("%s on a %s Limiter = %v, want an error wrapping ErrNotConstructed", m, lim.name, err)
				}
				if !strings.HasPrefix(err.Error(), "ratelimit: ") || !strings.Contains(err.Error(), "NewLimiter") {
					t.Errorf("error %q should start with the package name and point to NewLimiter", err)
				}
			})
		}
	}
	// The zero value stays unusable after a failed SetPolicy.
	var l Limiter
	_ = l.SetPolicy(p)
	if _, err := l.Allow(ctx, req); !errors.Is(err, ErrNotConstructed) {
		t.Fatalf("Allow after SetPolicy on a zero Limiter = %v, want ErrNotConstructed", err)
	}
}

func TestZeroMemoryStore(t *testing.T) {
	p, err := NewPolicy(Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 2)})
	if err != nil {
		t.Fatal(err)
	}
	lim := &p.rules[0].Limit
	calls := map[string]func(s *MemoryStore) error{
		"Take": func(s *MemoryStore) error {
			tk := &Take{Now: t0, Cost: 1, Buckets: []Bucket{{Rule: "r", Key: "u", Limit: lim}}, States: make([]BucketState, 1)}
			return s.Take(context.Background(), tk)
		},
		"Reclaim": func(s *MemoryStore) error { s.Reclaim(); return nil },
		"Reset":   func(s *MemoryStore) error { return s.Reset(context.Background(), "r", "u") },
		"CollectMetrics": func(s *MemoryStore) error {
			var bad []Metric
			s.CollectMetrics(func(m Metric) {
				if m.Value != 0 {
					bad = append(bad, m)
				}
			})
			if bad != nil {
				return fmt.Errorf("CollectMetrics reported %+v, want zeros", bad)
			}
			return nil
		},
		"Stats": func(s *MemoryStore) error {
			if got := s.Stats(); got != (MemoryStats{}) {
				return fmt.Errorf("Stats() = %+v, want zero counts", got)
			}
			return nil
		},
	}
	checkCovered(t, &MemoryStore{}, calls)
	for _, st := range []struct {
		name string
		s    *MemoryStore
	}{
		{"zero", &MemoryStore{}},
		{"nil", nil},
	} {
		for _, m := range slices.Sorted(maps.Keys(calls)) {
			t.Run(st.name+"/"+m, func(t *testing.T) {
				var err error
				noPanic(t, m, func() { err = calls[m](st.s) })
				if m != "Take" && m != "Reset" {
					if err != nil {
						t.Fatal(err)
					}
					return
				}
				if !errors.Is(err, ErrNotConstructed) || !strings.Contains(err.Error(), "NewMemoryStore") {
					t.Fatalf("%s on a %s MemoryStore = %v, want ErrNotConstructed pointing to NewMemoryStore", m, st.name, err)
				}
			})
		}
	}
}

func TestZeroHeaderFormat(t *testing.T) {
	l := newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	ctx := context.Background()
	allowed, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	if err != nil || !allowed.Allowed {
		t.Fatalf("AllowAt(t0, 1) = %+v, %v; want allowed", allowed, err)
	}
	denied, err := l.AllowAt(ctx, t0, Request{User: "u"}, 1)
	if err != nil || denied.Allowed {
		t.Fatalf("AllowAt(t0, 1) = %+v, %v; want denied", denied, err)
	}
	std, err := NewHeaderFormat()
	if err != nil {
		t.Fatal(err)
	}
	checkCovered(t, &HeaderFormat{}, map[string]bool{"Headers": true, "SetHeader": true, "Status": true, "AppendProblem": true})
	for _, f := range []struct {
		name string
		f    *HeaderFormat
	}{
		{"zero", &HeaderFormat{}},
		{"nil", nil},
	} {
		for _, d := range []struct {
			name string
			d    *Decision
		}{
			{"allowed", &allowed},
			{"denied", &denied},
			{"no decision made", &Decision{}},
		} {
			t.Run(f.name+"/"+d.name, func(t *testing.T) {
				noPanic(t, "Headers", func() {
					f.f.Headers(d.d, func(name, value string) {
						t.Errorf("Headers set %s: %s; a %s HeaderFormat sets nothing", name, value, f.name)
					})
				})
				h := map[string][]string{}
				noPanic(t, "SetHeader", func() { f.f.SetHeader(h, &[NumHeaderFields]string{"a", "b", "c", "d", "e", "f", "g"}, d.d) })
				if len(h) != 0 {
					t.Errorf("SetHeader stored %v; a %s HeaderFormat stores nothing", h, f.name)
				}
				var status int
				noPanic(t, "Status", func() { status = f.f.Status(d.d) })
				if want := std.Status(d.d); status != want {
					t.Errorf("Status = %d, want %d as from NewHeaderFormat()", status, want)
				}
				var body []byte
				noPanic(t, "AppendProblem", func() { body = f.f.AppendProblem(nil, d.d) })
				if want := std.AppendProblem(nil, d.d); string(body) != string(want) {
					t.Errorf("AppendProblem = %s, want %s as from NewHeaderFormat()", body, want)
				}
			})
		}
	}
}

func TestNilValues(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func() error
	}{
		{"CheckTake(nil)", func() error {
			if err := CheckTake(nil); !errors.Is(err, ErrInvalidOption) {
				return fmt.Errorf("CheckTake(nil) = %v, want ErrInvalidOption", err)
			}
			return nil
		}},
		{"MemoryStore.Take(nil)", func() error {
			if err := mustMemory(t).Take(context.Background(), nil); !errors.Is(err, ErrInvalidOption) {
				return fmt.Errorf("Take(ctx, nil) = %v, want ErrInvalidOption", err)
			}
			return nil
		}},
		{"nil Decision", func() error {
			var d *Decision
			if tiers := d.Tiers(); tiers != nil {
				return fmt.Errorf("Tiers() = %v, want nil", tiers)
			}
			if _, ok := d.Tier(); ok {
				return errors.New("Tier() = _, true; want false")
			}
			return nil
		}},
		{"nil Policy", func() error {
			var p *Policy
			if rules := p.Rules(); rules != nil {
				return fmt.Errorf("Rules() = %v, want nil", rules)
			}
			return nil
		}},
		{"zero RuleError", func() error {
			var e RuleError
			if got, want := e.Error(), `ratelimit: rule "": invalid rule`; got != want {
				return fmt.Errorf("Error() = %q, want %q", got, want)
			}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			noPanic(t, tc.name, func() { err = tc.do() })
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDecideUndecidable: a Limit that NewPolicy did not validate denies,
// as a cost no wait cures, instead of dividing by zero.
func TestDecideUndecidable(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Limit
	}{
		{"zero Limit", Limit{}},
		{"unvalidated token bucket", TokenBucket(PerSecond(1), 4)},
		{"unvalidated shaping", Shaping(PerSecond(1), 4, time.Second)},
		{"fixed window of 0", FixedWindow(4, 0)},
		{"sliding window of 0", SlidingWindow(4, 0)},
		{"sliding log of 0", SlidingLog(4, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := State{A: 7, B: 1}
			var (
				st   BucketState
				next State
			)
			noPanic(t, "Decide", func() { st, next = tc.l.Decide(&s, int64(time.Second), 1) })
			if st.Allowed || st.Reason != ReasonCostExceedsLimit {
				t.Errorf("Decide(1s, 1) = %+v, want denied with ReasonCostExceedsLimit", st)
			}
			if next.A != s.A || next.B != s.B || next.C != s.C {
				t.Errorf("Decide(1s, 1) next = %+v, want the state unchanged, %+v", next, s)
			}
		})
	}
}

func TestMaxTime(t *testing.T) {
	if got, want := MaxTime(), time.Unix(0, math.MaxInt64-2*int64(MaxSpan)); !got.Equal(want) {
		t.Fatalf("MaxTime() = %v, want %v", got, want)
	}
	l := newTestLimiter(t, nil, Rule{Name: "r", Scope: ScopeUser, Limit: TokenBucket(PerSecond(1), 1)})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		at   time.Time
		want error
	}{
		{"at MaxTime", MaxTime(), nil},
		{"1ns past MaxTime", MaxTime().Add(1), ErrInvalidTime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := l.AllowAt(ctx, tc.at, Request{User: "u"}, 1); !errors.Is(err, tc.want) {
				t.Fatalf("AllowAt(%v, 1) error = %v, want %v", tc.at, err, tc.want)
			}
		})
	}
}
