package redisscript

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// wantArgs formats l's script arguments independently of LimitArgs: a
// limit longer than 100 days (at microsecond resolution) has its
// algorithm's code plus 5.
func wantArgs(l *core.Limit) [5]string {
	long := 0
	if l.Resolution() == time.Microsecond {
		long = 5
	}
	code := func(c int) string { return strconv.Itoa(c + long) }
	switch l.Algorithm() {
	case core.AlgTokenBucket:
		return [5]string{code(1), strconv.FormatInt(int64(l.Interval()), 10), strconv.FormatInt(int64(l.Window()), 10), strconv.FormatInt(l.Burst(), 10), "0"}
	case core.AlgShaping:
		return [5]string{code(2), strconv.FormatInt(int64(l.Interval()), 10), strconv.FormatInt(int64(l.Window()), 10), strconv.FormatInt(l.Burst(), 10), strconv.FormatInt(int64(l.MaxWait()), 10)}
	case core.AlgFixedWindow:
		return [5]string{code(3), strconv.FormatInt(int64(l.Window()), 10), strconv.FormatInt(l.Burst(), 10), "0", "0"}
	case core.AlgSlidingWindow:
		return [5]string{code(4), strconv.FormatInt(int64(l.Window()), 10), strconv.FormatInt(l.Burst(), 10), "0", "0"}
	case core.AlgSlidingLog:
		return [5]string{code(5), strconv.FormatInt(int64(l.Window()), 10), strconv.FormatInt(l.Burst(), 10), "0", "0"}
	}
	return [5]string{}
}

func checkArgs(t *testing.T, l *core.Limit) {
	t.Helper()
	got, want := LimitArgs(l), wantArgs(l)
	for i := range want {
		if s, ok := got[i].(string); !ok || s != want[i] {
			t.Fatalf("LimitArgs(%v) = %v, want %q", l, *got, want)
		}
	}
}

// reloadPolicy returns a policy of n rules whose numbers depend on gen
// (from -1), so that limits of different generations differ.
func reloadPolicy(t testing.TB, gen, n int) *core.Policy {
	t.Helper()
	p, err := newReloadPolicy(gen, n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newReloadPolicy(gen, n int) (*core.Policy, error) {
	rules := make([]core.Rule, n)
	for j := range rules {
		b := int64((gen+1)*n + j + 1)
		var l core.Limit
		switch j % 5 {
		case 0:
			l = core.TokenBucket(core.PerSecond(10), b)
		case 1:
			l = core.Shaping(core.PerSecond(1000), b, time.Second)
		case 2:
			l = core.FixedWindow(b, time.Minute)
		case 3:
			l = core.SlidingWindow(b, time.Hour)
		case 4:
			l = core.SlidingLog(b, time.Second)
		}
		rules[j] = core.Rule{Name: "r" + strconv.Itoa(j), Scope: core.ScopeUser, Limit: l}
	}
	return core.NewPolicy(rules...)
}

// limitsOf returns pointers to a policy's limits, as a Limiter hands them
// to a store: into one rules array that holds them all.
func limitsOf(p *core.Policy) []*core.Limit {
	rules := p.Rules()
	ls := make([]*core.Limit, len(rules))
	for i := range rules {
		ls[i] = &rules[i].Limit
	}
	return ls
}

// settle runs the garbage collector until the caches hold at most max
// entries, and returns their sizes. Cleanups run on their own goroutine
// after a collection, so it may take a few.
func settle(max int) (mapped, recent int) {
	for range 200 {
		runtime.GC()
		if mapped, recent = cachedLimitArgs(); mapped <= max && recent <= max {
			return mapped, recent
		}
		runtime.Gosched()
	}
	return mapped, recent
}

// TestLimitArgsReloads reloads a 20-rule policy 10,000 times, as
// Limiter.SetPolicy does: the caches keep only the limits still reachable,
// and the arguments stay right throughout.
func TestLimitArgsReloads(t *testing.T) {
	const reloads, rules = 10_000, 20
	settle(0)                                    // what other tests left
	kept := limitsOf(reloadPolicy(t, -1, rules)) // a policy in use throughout
	for _, l := range kept {
		checkArgs(t, l)
	}
	var current []*core.Limit
	for gen := range reloads {
		current = limitsOf(reloadPolicy(t, gen, rules))
		for _, l := range current {
			checkArgs(t, l)
			checkArgs(t, l) // a hit
		}
		if gen%1000 == 0 {
			for _, l := range kept {
				checkArgs(t, l)
			}
		}
	}
	live := len(kept) + len(current)
	mapped, recent := settle(live)
	t.Logf("after %d reloads of %d rules: %d entries mapped, %d recent, %d limits live", reloads, rules, mapped, recent, live)
	if mapped > live || recent > live {
		t.Errorf("after %d reloads: %d entries mapped and %d recent, want at most the %d live limits", reloads, mapped, recent, live)
	}
	for _, l := range append(kept, current...) {
		checkArgs(t, l)
	}
	runtime.KeepAlive(kept)
	runtime.KeepAlive(current)
}

// TestLimitArgsReusedAddress: an entry left at a limit's address by a dead
// limit of another value, its cleanup not yet run, is not taken for it.
func TestLimitArgsReusedAddress(t *testing.T) {
	for _, tc := range []struct {
		name       string
		dead, live core.Limit
	}{
		{"other burst", core.TokenBucket(core.PerSecond(10), 5), core.TokenBucket(core.PerSecond(10), 50)},
		{"other rate", core.TokenBucket(core.PerSecond(20), 50), core.TokenBucket(core.PerSecond(10), 50)},
		{"other algorithm", core.FixedWindow(50, time.Minute), core.SlidingWindow(50, time.Minute)},
		{"other wait", core.Shaping(core.PerSecond(10), 5, time.Second), core.Shaping(core.PerSecond(10), 5, 2*time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := core.NewPolicy(
				core.Rule{Name: "dead", Scope: core.ScopeUser, Limit: tc.dead},
				core.Rule{Name: "live", Scope: core.ScopeUser, Limit: tc.live},
			)
			if err != nil {
				t.Fatal(err)
			}
			ls := limitsOf(p)
			plantLimitArgs(ls[1], *ls[0])
			checkArgs(t, ls[1])
			checkArgs(t, ls[1])
			runtime.KeepAlive(ls)
		})
	}
}

// TestLimitArgsConcurrent looks limits up from many goroutines while
// policies come and go; run with -race.
func TestLimitArgsConcurrent(t *testing.T) {
	const goroutines, reloads = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	shared := limitsOf(reloadPolicy(t, -1, 10))
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := range reloads {
				mine := shared
				if gen%2 == 0 {
					// Every goroutine builds the same numbers at new
					// addresses, and they die at once.
					p, err := newReloadPolicy(gen%7, 10)
					if err != nil {
						errs <- err
						return
					}
					mine = limitsOf(p)
				}
				for _, l := range mine {
					got, want := LimitArgs(l), wantArgs(l)
					for i := range want {
						if got[i] != want[i] {
							errs <- fmt.Errorf("goroutine %d: LimitArgs(%v) = %v, want %q", g, l, *got, want)
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	runtime.KeepAlive(shared)
}

func benchLimit(b *testing.B) *core.Limit {
	b.Helper()
	return limitsOf(reloadPolicy(b, 0, 2))[0]
}

func BenchmarkLimitArgs(b *testing.B) {
	l := benchLimit(b)
	LimitArgs(l)
	b.ReportAllocs()
	for b.Loop() {
		if LimitArgs(l) == nil {
			b.Fatal("nil arguments")
		}
	}
}

func BenchmarkLimitArgsParallel(b *testing.B) {
	l := benchLimit(b)
	LimitArgs(l)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if LimitArgs(l) == nil {
				b.Fatal("nil arguments")
			}
		}
	})
}
