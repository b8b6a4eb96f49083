package benchmarks

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The admission test: 64 goroutines make 10 attempts each, all at once, on
// one key whose advertised limit is 100 an hour. Nothing refills while the
// test runs, so an exact limiter admits 100, and every admission past 100 is
// one its limit did not allow.
const (
	admissionGoroutines = 64
	admissionAttempts   = 10
)

// admissionRow is one implementation's result. cmd/report reads the
// "admission:" lines that logAdmission writes.
type admissionRow struct {
	store, impl        string
	admitted, errors   int64
	elapsed            time.Duration
	refillDuringTheRun bool // the run outlasted one token's refill time
}

// admit runs the test on im.
func admit(im impl) admissionRow {
	ctx := context.Background()
	s := newSubject("admission", 1)
	var admitted, errs atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range admissionGoroutines {
		wg.Go(func() {
			<-start
			for range admissionAttempts {
				ok, err := im.allow(ctx, &s)
				switch {
				case err != nil:
					// Whatever the library answered alongside an error,
					// the request is counted as an error, not admitted.
					errs.Add(1)
				case ok:
					admitted.Add(1)
				}
			}
		})
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	return admissionRow{
		admitted:           admitted.Load(),
		errors:             errs.Load(),
		elapsed:            elapsed,
		refillDuringTheRun: elapsed >= admissionQuota.period/time.Duration(admissionQuota.n),
	}
}

// TestAdmissionMemory runs the admission test on every in-memory
// implementation. Ours must admit exactly the limit with no error; the
// peers' numbers are logged for BENCHMARKS.md, whatever they are.
func TestAdmissionMemory(t *testing.T) {
	var rows []admissionRow
	for _, mb := range memoryBuilders {
		t.Run("impl="+mb.name, func(t *testing.T) {
			r := admit(mb.build(t, admissionQuota, 1, 1))
			r.store, r.impl = "memory", mb.name
			rows = append(rows, r)
			checkOurs(t, r)
		})
	}
	logAdmission(t, rows)
}

// TestAdmissionRedis runs the admission test on every Redis implementation
// (not the ceilings, which decide nothing), each on an emptied server.
func TestAdmissionRedis(t *testing.T) {
	srv := redisServer(t)
	var rows []admissionRow
	for _, rb := range redisBuilders {
		if strings.HasPrefix(rb.name, "ceiling_") {
			continue
		}
		t.Run("impl="+rb.name, func(t *testing.T) {
			flushAll(t, srv)
			r := admit(rb.build(t, standaloneTarget(srv), new(sent), admissionQuota, 1, false))
			r.store, r.impl = "redis", rb.name
			rows = append(rows, r)
			checkOurs(t, r)
		})
	}
	logAdmission(t, rows)
}

func checkOurs(t *testing.T, r admissionRow) {
	t.Helper()
	if !strings.HasPrefix(r.impl, "ours") {
		return
	}
	if r.refillDuringTheRun {
		t.Fatalf("the test took %v, longer than one token's refill: it cannot tell an exact limiter", r.elapsed)
	}
	if r.admitted != admissionQuota.n || r.errors != 0 {
		t.Errorf("%s: %d goroutines x %d attempts at a limit of %d: admitted %d with %d errors, want %d and no error",
			r.impl, admissionGoroutines, admissionAttempts, admissionQuota.n, r.admitted, r.errors, admissionQuota.n)
	}
}

// logAdmission logs a table for people and one "admission:" line per row
// for cmd/report.
func logAdmission(t *testing.T, rows []admissionRow) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "limit %d per %v, %d goroutines x %d attempts on one key\n",
		admissionQuota.n, admissionQuota.period, admissionGoroutines, admissionAttempts)
	fmt.Fprintf(&b, "%-8s %-24s %9s %7s %12s\n", "store", "impl", "admitted", "errors", "elapsed")
	for _, r := range rows {
		note := ""
		if r.refillDuringTheRun {
			note = "  (slower than one refill: not conclusive)"
		}
		fmt.Fprintf(&b, "%-8s %-24s %9d %7d %12v%s\n", r.store, r.impl, r.admitted, r.errors, r.elapsed.Round(time.Microsecond), note)
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "admission: store=%s impl=%s limit=%d attempts=%d admitted=%d errors=%d elapsed=%s refill=%t\n",
			r.store, r.impl, admissionQuota.n, admissionGoroutines*admissionAttempts, r.admitted, r.errors,
			r.elapsed.Round(time.Microsecond), r.refillDuringTheRun)
	}
	t.Log("\n" + b.String())
}
