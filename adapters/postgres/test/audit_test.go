package pglimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/pgtest"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrated starts a PostgreSQL server of the test's own, which the test
// may stop and restart, with the schema, and returns a pool on it.
func migrated(t testing.TB) (*pgtest.Server, *pgxpool.Pool) {
	t.Helper()
	srv := pgtest.Start(t)
	return srv, openMigrated(t, srv.URL())
}

// closeAudit closes a within a bound, failing t if it cannot.
func closeAudit(t testing.TB, a *pglimit.Audit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close = %v, want nil", err)
	}
}

// auditedLimiter makes a limiter on its own memory store with the audit's
// Option, none if a is nil.
func auditedLimiter(t testing.TB, a *pglimit.Audit, rules ...core.Rule) *core.Limiter {
	t.Helper()
	var opts []core.Option
	if a != nil {
		opts = append(opts, a.Option())
	}
	return newLimiter(t, rules, opts...)
}

// newLimiter makes a limiter of rules with opts.
func newLimiter(tb testing.TB, rules []core.Rule, opts ...core.Option) *core.Limiter {
	tb.Helper()
	p, err := core.NewPolicy(rules...)
	if err != nil {
		tb.Fatal(err)
	}
	l, err := core.NewLimiter(p, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// oneThenDeny admits one request per identity an hour.
var oneThenDeny = core.TokenBucket(core.Every(time.Hour), 1)

// violationRow is a RateLimitViolation row in PostgreSQL's text form.
type violationRow struct {
	bucketKey, userID, ip, endpoint, requestedAt, tokens, ruleID, shadow string
}

func readViolations(t *testing.T, srv *pgtest.Server, shadow bool) []violationRow {
	t.Helper()
	col := "''"
	if shadow {
		col = "shadow::text"
	}
	rows, err := srv.Query(`SELECT bucket_key, user_id, ip_address::text, endpoint,
		to_char(requested_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), tokens_at_time::text,
		rule_id::text, ` + col + ` FROM RateLimitViolation ORDER BY violation_id`)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]violationRow, len(rows))
	for i, r := range rows {
		out[i] = violationRow{r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]}
	}
	return out
}

// TestAuditRows writes denials of every scope and checks each column as
// PostgreSQL stores it.
func TestAuditRows(t *testing.T) {
	srv, pool := migrated(t)
	rows, err := srv.Query(`INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, name)
		VALUES ('user:{user_id}', 'user', 1, 1, 'per-user') RETURNING rule_id`)
	if err != nil {
		t.Fatal(err)
	}
	var userRuleID int64
	fmt.Sscan(rows[0][0], &userRuleID)

	rules := []core.Rule{
		{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny},
		{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.Every(time.Hour), 3)},
		{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.FixedWindow(1, time.Hour)},
		{Name: "per-tenant", Scope: core.Dimension("tenant"), Limit: core.TokenBucket(core.Every(time.Hour), 2)},
		{Name: "watch", Scope: core.ScopeGlobal, Limit: oneThenDeny, Shadow: true},
	}
	ids := func(rule, plan string) (int64, bool) {
		if rule == "per-user" && plan == "" {
			return userRuleID, true
		}
		return 0, false
	}
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)
	t1 := t0.Add(time.Second)
	run := func(t *testing.T, a *pglimit.Audit) {
		l := auditedLimiter(t, a, rules...)
		ctx := context.Background()
		steps := []struct {
			at      time.Time
			req     core.Request
			allowed bool
		}{
			{t0, core.Request{User: "alice", IP: "203.0.113.7", Endpoint: "/a", Dims: []core.Dim{{Name: "tenant", Value: "acme"}}}, true},
			// per-user, per-endpoint deny; watch (shadow) too.
			{t1, core.Request{User: "alice", IP: "2001:db8::1", Endpoint: "/a"}, false},
			// nothing denies but watch: allowed, a shadow denial.
			{t1, core.Request{User: "bob", IP: "2001:db8:1:2::/64", Endpoint: "/b"}, true},
		}
		for i, s := range steps {
			d, err := l.AllowAt(ctx, s.at, s.req, 1)
			if err != nil || d.Allowed != s.allowed {
				t.Fatalf("step %d: AllowAt = %v, %v, want %v", i, d.Allowed, err, s.allowed)
			}
		}
		closeAudit(t, a)
	}
	const at1 = "2030-01-02T03:04:06.678901"
	t.Run("with shadow column", func(t *testing.T) {
		a, err := pglimit.NewAudit(pool, pglimit.WithRuleIDs(ids), pglimit.WithFlushInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		run(t, a)
		want := []violationRow{
			{"per-user:alice", "alice", "2001:db8::1/128", "/a", at1, "0", fmt.Sprint(userRuleID), "false"},
			{"per-endpoint:/a", "alice", "2001:db8::1/128", "/a", at1, "0", "", "false"},
			{"watch:*", "alice", "2001:db8::1/128", "/a", at1, "0", "", "true"},
			{"watch:*", "bob", "2001:db8:1:2::/64", "/b", at1, "0", "", "true"},
		}
		if got := readViolations(t, srv, true); !equalRows(got, want) {
			t.Errorf("rows:\n%v\nwant\n%v", got, want)
		}
		if st := a.Stats(); st.Written != 4 || st.Enqueued != 4 || st.Thinned != 0 {
			t.Errorf("Stats() = %+v, want 4 enqueued and written", st)
		}
	})
	// A table made before the column (from the seed's definition): shadow
	// denials are not written rather than written unmarked.
	if err := srv.Exec(`TRUNCATE RateLimitViolation;
		ALTER TABLE RateLimitViolation DROP COLUMN shadow`); err != nil {
		t.Fatal(err)
	}
	t.Run("without shadow column", func(t *testing.T) {
		a, err := pglimit.NewAudit(pool, pglimit.WithRuleIDs(ids), pglimit.WithFlushInterval(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		run(t, a)
		want := []violationRow{
			{"per-user:alice", "alice", "2001:db8::1/128", "/a", at1, "0", fmt.Sprint(userRuleID), ""},
			{"per-endpoint:/a", "alice", "2001:db8::1/128", "/a", at1, "0", "", ""},
		}
		if got := readViolations(t, srv, false); !equalRows(got, want) {
			t.Errorf("rows:\n%v\nwant\n%v", got, want)
		}
		st := a.Stats()
		if st.Written != 2 || st.Enqueued != 4 || st.Thinned != 2 || st.Failed != 0 || st.Dropped != 0 {
			t.Errorf("Stats() = %+v, want 4 enqueued, 2 written, 2 shadow rows thinned for want of a column", st)
		}
	})
}

// equalRows compares rows, the shadow row's order aside: the rows of one
// decision are written in policy order, which puts watch last.
func equalRows(got, want []violationRow) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestAuditStaleRuleID: a rule_id whose row is gone fails the batch's
// foreign key; the rows are written with rule_id NULL rather than lost.
func TestAuditStaleRuleID(t *testing.T) {
	srv, pool := migrated(t)
	a, err := pglimit.NewAudit(pool, pglimit.WithRuleIDs(func(string, string) (int64, bool) { return 424242, true }),
		pglimit.WithFlushInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	l := auditedLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
	for range 3 {
		if _, err := l.Allow(context.Background(), core.Request{User: "u"}); err != nil {
			t.Fatal(err)
		}
	}
	closeAudit(t, a)
	rows, err := srv.Query(`SELECT count(*), count(rule_id) FROM RateLimitViolation`)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0][0] != "2" || rows[0][1] != "0" {
		t.Errorf("rows, rows with rule_id = %s, %s, want 2, 0", rows[0][0], rows[0][1])
	}
	if st := a.Stats(); st.Written != 2 || st.Failed != 0 || st.WriteErrors < 1 {
		t.Errorf("Stats() = %+v, want 2 written, none failed, a write error", st)
	}
}

// TestAuditInvalidUTF8: text that is not UTF-8, which PostgreSQL refuses,
// is written with U+FFFD in place of each run of bad bytes, in the same
// batch as the other requests' rows.
func TestAuditInvalidUTF8(t *testing.T) {
	srv, pool := migrated(t)
	// One batch, written by Close.
	a, err := pglimit.NewAudit(pool, pglimit.WithFlushInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	l := auditedLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, req := range []core.Request{
		{User: "alice", Endpoint: "/search"},
		{User: "mallory\xff\xfe", Endpoint: "/s\xe9arch"},
		{User: "bob", Endpoint: "/search"},
	} {
		for i, want := range []bool{true, false} {
			if d, err := l.AllowAt(context.Background(), t0, req, 1); err != nil || d.Allowed != want {
				t.Fatalf("AllowAt #%d (user %q) = %v, %v, want %v", i, req.User, d.Allowed, err, want)
			}
		}
	}
	closeAudit(t, a)
	const at = "2030-01-02T03:04:05.000000"
	want := []violationRow{
		{"per-user:alice", "alice", "", "/search", at, "0", "", ""},
		{"per-user:mallory\uFFFD", "mallory\uFFFD", "", "/s\uFFFDarch", at, "0", "", ""},
		{"per-user:bob", "bob", "", "/search", at, "0", "", ""},
	}
	if got := readViolations(t, srv, false); !equalRows(got, want) {
		t.Errorf("rows:\n%q\nwant\n%q", got, want)
	}
	if st := a.Stats(); st.Written != 3 || st.Failed != 0 {
		t.Errorf("Stats() = %+v, want 3 written, none failed", st)
	}
}

// TestAuditRefusedRows: rows the database refuses (here by a CHECK
// constraint of the operator's) are counted as failed, one by one, and the
// rest of their batch is written, also when failed batches are not
// retried.
func TestAuditRefusedRows(t *testing.T) {
	srv, pool := migrated(t)
	if err := srv.Exec(`ALTER TABLE RateLimitViolation ADD CONSTRAINT no_banned CHECK (user_id NOT LIKE 'banned%')`); err != nil {
		t.Fatal(err)
	}
	users := []string{"u0", "banned1", "u2", "u3", "u4", "u5", "u6", "banned7", "u8"}
	for _, tc := range []struct {
		name string
		opts []pglimit.AuditOption
	}{
		{"retried", nil},
		{"not retried", []pglimit.AuditOption{pglimit.WithRetryTimeout(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := srv.Exec(`TRUNCATE RateLimitViolation`); err != nil {
				t.Fatal(err)
			}
			// One batch, written by Close.
			a, err := pglimit.NewAudit(pool, append([]pglimit.AuditOption{pglimit.WithFlushInterval(time.Hour)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			l := auditedLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
			for _, u := range users {
				for range 2 { // the second is denied
					if _, err := l.Allow(context.Background(), core.Request{User: u}); err != nil {
						t.Fatal(err)
					}
				}
			}
			closeAudit(t, a)
			var got []string
			for _, r := range readViolations(t, srv, false) {
				got = append(got, r.userID)
			}
			if want := []string{"u0", "u2", "u3", "u4", "u5", "u6", "u8"}; !slices.Equal(got, want) {
				t.Errorf("user_id of the rows written = %q, want %q", got, want)
			}
			if st := a.Stats(); st.Written != 7 || st.Failed != 2 {
				t.Errorf("Stats() = %+v, want 7 written and the 2 refused rows failed", st)
			}
		})
	}
}

// TestAuditDatabaseDown: while the server is down, batches are retried for
// WithRetryTimeout, then dropped, counted and logged (throttled); when it
// is back, rows are written again.
func TestAuditDatabaseDown(t *testing.T) {
	srv, pool := migrated(t)
	var logBuf syncBuffer
	logger := slog.New(slog.NewTextHandler(&logBuf, nil))
	a, err := pglimit.NewAudit(pool, pglimit.WithFlushInterval(time.Millisecond), pglimit.WithRetryTimeout(300*time.Millisecond),
		pglimit.WithAuditLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAudit(t, a)
	l := auditedLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
	deny := func(n int) {
		for range n {
			if d, err := l.Allow(context.Background(), core.Request{User: "u"}); err != nil || d.Allowed {
				t.Fatalf("Allow = %v, %v, want denied", d.Allowed, err)
			}
		}
	}
	l.Allow(context.Background(), core.Request{User: "u"}) //nolint:errcheck // the one admitted
	deny(5)
	waitFor(t, "5 rows written", 30*time.Second, func() bool { return a.Stats().Written == 5 })

	srv.Stop()
	deny(7)
	waitFor(t, "7 rows failed", 30*time.Second, func() bool { return a.Stats().Failed == 7 })
	st := a.Stats()
	if st.WriteErrors < 2 {
		t.Errorf("Stats() = %+v, want several write errors (the retries)", st)
	}
	if out := logBuf.String(); strings.Count(out, "pglimit: writing violation rows failed") != 1 || !strings.Contains(out, "suppressed") && !strings.Contains(out, "dropped=") {
		t.Errorf("log = %q, want one throttled record of the failure", out)
	}

	srv.Restart(t)
	deny(3)
	waitFor(t, "3 more rows written", 30*time.Second, func() bool { return a.Stats().Written == 8 })
	if rows, err := srv.Query(`SELECT count(*) FROM RateLimitViolation`); err != nil || rows[0][0] != "8" {
		t.Errorf("count(*) = %v, %v, want 8", rows, err)
	}
}

// syncBuffer is a bytes.Buffer for a logger on another goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAuditCloseStopsWriter: Close flushes, stops the goroutine and
// returns; with an ended context it stops it all the same.
func TestAuditCloseStopsWriter(t *testing.T) {
	srv, pool := migrated(t)
	// The pool's own goroutines start with its first connection.
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	for _, dead := range []bool{false, true} {
		a, err := pglimit.NewAudit(pool, pglimit.WithFlushInterval(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		l := auditedLimiter(t, a, core.Rule{Name: "g", Scope: core.ScopeGlobal, Limit: oneThenDeny})
		for range 10 {
			l.Allow(context.Background(), core.Request{}) //nolint:errcheck // counted below
		}
		ctx, cancel := context.WithCancel(context.Background())
		if dead {
			cancel()
			err = a.Close(ctx)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Close(canceled ctx) = %v, want context.Canceled", err)
			}
			if st := a.Stats(); st.Written+st.Failed+st.Dropped != 9 || st.QueueDepth != 0 {
				t.Errorf("after Close(canceled): Stats() = %+v, want the 9 rows written, failed or dropped", st)
			}
		} else {
			if err := a.Close(ctx); err != nil {
				t.Errorf("Close = %v, want nil", err)
			}
			if st := a.Stats(); st.Written != 9 || st.Enqueued != 9 {
				t.Errorf("after Close: Stats() = %+v, want the 9 rows written", st)
			}
		}
		cancel()
		if err := a.Close(context.Background()); err != nil {
			t.Errorf("second Close = %v, want nil", err)
		}
		waitFor(t, "the writer goroutine to end", 30*time.Second, func() bool { return runtime.NumGoroutine() <= base })
	}
	if rows, err := srv.Query(`SELECT count(*) >= 9 FROM RateLimitViolation`); err != nil || rows[0][0] != "t" {
		t.Errorf("rows = %v, %v, want at least the first audit's 9", rows, err)
	}
}

// TestAuditDenyFlood denies at >= 100k requests/s from many goroutines with
// the audit attached, and checks that every row the queue accepted is in
// the table after Close, and that the others were counted as dropped.
func TestAuditDenyFlood(t *testing.T) {
	srv, pool := migrated(t)
	a, err := pglimit.NewAudit(pool)
	if err != nil {
		t.Fatal(err)
	}
	l := auditedLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
	const (
		goroutines = 32
		users      = 1000
		floodFor   = time.Second
	)
	ctx := context.Background()
	names := make([]string, users)
	for u := range names {
		names[u] = fmt.Sprintf("user-%d", u)
		if _, err := l.Allow(ctx, core.Request{User: names[u]}); err != nil {
			t.Fatal(err)
		}
	}
	var denied, allowed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(floodFor)
	for g := range goroutines {
		wg.Go(func() {
			var n, ok int64
			for i := g; ; i++ {
				if i%256 == 0 && time.Now().After(stop) {
					break
				}
				d, err := l.Allow(ctx, core.Request{User: names[i%users], IP: "198.51.100.1", Endpoint: "/flood"})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					ok++
				} else {
					n++
				}
			}
			denied.Add(n)
			allowed.Add(ok)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	rate := float64(denied.Load()) / elapsed.Seconds()
	before := a.Stats()
	closeAudit(t, a)
	st := a.Stats()
	rows, err := srv.Query(`SELECT count(*), count(DISTINCT bucket_key) FROM RateLimitViolation`)
	if err != nil {
		t.Fatal(err)
	}
	var inTable int64
	fmt.Sscan(rows[0][0], &inTable)
	t.Logf("flood: %d denials in %v (%.0f/s) from %d goroutines; accepted %d, dropped %d, written %d, in table %d (%s buckets); at the flood's end %d written, %d queued",
		denied.Load(), elapsed.Round(time.Millisecond), rate, goroutines, st.Enqueued, st.Dropped, st.Written, inTable, rows[0][1],
		before.Written, before.QueueDepth)
	if allowed.Load() != 0 {
		t.Errorf("%d requests allowed in the flood, want 0", allowed.Load())
	}
	// The race detector slows every memory access several times over: the
	// rate is then held to a tenth, every count to the same rule.
	wantRate := 100_000.0
	if raceEnabled() {
		wantRate /= 10
		t.Logf("built with -race: the deny rate must reach %.0f/s, not 100000/s", wantRate)
	}
	if rate < wantRate {
		t.Errorf("deny rate %.0f/s, want >= %.0f/s", rate, wantRate)
	}
	if st.Enqueued+st.Dropped != denied.Load() || st.Thinned != 0 {
		t.Errorf("Stats() = %+v: enqueued + dropped != %d denials", st, denied.Load())
	}
	if st.Written != st.Enqueued || inTable != st.Enqueued || st.Failed != 0 || st.QueueDepth != 0 {
		t.Errorf("Stats() = %+v, %d rows in the table: want every accepted row written", st, inTable)
	}
	// The default write rate bounds what the flood wrote while it lasted:
	// at most the rate's share of the time, and the batch written before
	// the writer first waited.
	if most := int64(pglimit.DefaultMaxWriteRate*elapsed.Seconds()) + pglimit.DefaultBatchSize; before.Written > most {
		t.Errorf("%d rows written during the %v flood, want at most %d (DefaultMaxWriteRate)", before.Written, elapsed.Round(time.Millisecond), most)
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// TestAuditMaxWriteRate: a flood offering far more rows than
// WithMaxWriteRate allows gets that many rows a second written, and the
// rest dropped and counted; Close then writes what is queued.
func TestAuditMaxWriteRate(t *testing.T) {
	srv, pool := migrated(t)
	const rate, batch = 2000, 100
	a, err := pglimit.NewAudit(pool, pglimit.WithMaxWriteRate(rate), pglimit.WithBatchSize(batch), pglimit.WithQueueSize(1000))
	if err != nil {
		t.Fatal(err)
	}
	l := auditedLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
	ctx := context.Background()
	var denied int64
	start := time.Now()
	for i := 0; time.Since(start) < 1500*time.Millisecond; i++ {
		// Up to about 50,000 denials a second: 25 times the rate, with
		// room on the other core for the writer.
		if i%50 == 0 {
			time.Sleep(time.Millisecond)
		}
		d, err := l.Allow(ctx, core.Request{User: fmt.Sprintf("user-%d", i%100)})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			denied++
		}
	}
	elapsed := time.Since(start)
	during := a.Stats()
	closeAudit(t, a)
	st := a.Stats()
	rows, err := srv.Query(`SELECT count(*) FROM RateLimitViolation`)
	if err != nil {
		t.Fatal(err)
	}
	var inTable int64
	fmt.Sscan(rows[0][0], &inTable)
	most := int64(rate*elapsed.Seconds()) + batch
	t.Logf("%d denials in %v: %d rows written meanwhile (at most %d allowed), %d dropped; after Close %d written, %d in the table",
		denied, elapsed.Round(time.Millisecond), during.Written, most, st.Dropped, st.Written, inTable)
	if during.Written > most {
		t.Errorf("%d rows written in %v at WithMaxWriteRate(%d), want at most %d", during.Written, elapsed.Round(time.Millisecond), rate, most)
	}
	if during.Written < rate/2 {
		t.Errorf("%d rows written in %v at WithMaxWriteRate(%d): the writer stalled", during.Written, elapsed.Round(time.Millisecond), rate)
	}
	// The flood's own pace depends on the machine (its sleeps overshoot
	// under load): five times what the writer may write is flood enough,
	// with rows dropped to show the queue overflowed.
	if denied < 5*most || st.Dropped == 0 {
		t.Errorf("%d denials, %d dropped: the flood did not outrun the rate", denied, st.Dropped)
	}
	if st.Enqueued+st.Dropped != denied || st.Written != st.Enqueued || inTable != st.Enqueued {
		t.Errorf("Stats() = %+v, %d rows in the table, %d denials: want every accepted row written, the rest dropped", st, inTable, denied)
	}
}
