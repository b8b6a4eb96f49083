package pglimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/jackc/pgx/v5/pgxpool"
)

// unreachablePool is a pool for a port nothing listens on: pgxpool does not
// connect until asked, so options and the hot path can be tested without a
// server.
func unreachablePool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// stuckPool is a pool for a server that accepts connections and never
// answers: the writer blocks in its first write, holding that batch, until
// Close gives up on it, so that what Observe does is counted exactly.
func stuckPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@"+ln.Addr().String()+"/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return pool
}

// closeStuck closes an Audit on a stuckPool: Close gives up, as it must.
func closeStuck(t testing.TB, a *Audit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := a.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close on a server that never answers = %v, want context.DeadlineExceeded", err)
	}
}

// closeAudit closes a within a bound, failing t if it cannot.
func closeAudit(t testing.TB, a *Audit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close = %v, want nil", err)
	}
}

// newLimiter makes a limiter on its own memory store with the audit's
// observer.
func newLimiter(t testing.TB, a *Audit, rules ...core.Rule) *core.Limiter {
	t.Helper()
	if a == nil {
		return newObserved(t, nil, rules...)
	}
	return newObserved(t, a.Observe, rules...)
}

// oneThenDeny admits one request per identity an hour.
var oneThenDeny = core.TokenBucket(core.Every(time.Hour), 1)

func TestNewAuditOptions(t *testing.T) {
	pool := unreachablePool(t)
	tests := []struct {
		name string
		pool *pgxpool.Pool
		opts []AuditOption
		want string // in the error; "" for none
	}{
		{"defaults", pool, nil, ""},
		{"all valid", pool, []AuditOption{WithQueueSize(1), WithBatchSize(1), WithFlushInterval(time.Millisecond),
			WithRetryTimeout(0), WithMaxWriteRate(0), WithSampling(1), WithPerBucketInterval(time.Millisecond),
			WithRuleIDs(func(string, string) (int64, bool) { return 0, false }), WithAuditLogger(slog.Default())}, ""},
		{"nil pool", nil, nil, "pglimit: NewAudit: pool is nil"},
		{"nil option", pool, []AuditOption{WithQueueSize(1), nil}, "pglimit: NewAudit: option 1 is nil"},
		{"queue size", pool, []AuditOption{WithQueueSize(0)}, "pglimit: WithQueueSize: size must be >= 1, got 0"},
		{"batch size", pool, []AuditOption{WithBatchSize(-1)}, "pglimit: WithBatchSize: size must be >= 1, got -1"},
		{"flush interval", pool, []AuditOption{WithFlushInterval(0)}, "pglimit: WithFlushInterval: interval must be > 0, got 0s"},
		{"retry timeout", pool, []AuditOption{WithRetryTimeout(-time.Second)}, "pglimit: WithRetryTimeout: timeout must be >= 0, got -1s"},
		{"max write rate", pool, []AuditOption{WithMaxWriteRate(-1)}, "pglimit: WithMaxWriteRate: rows per second must be >= 0, got -1"},
		{"sampling", pool, []AuditOption{WithSampling(0)}, "pglimit: WithSampling: n must be >= 1, got 0"},
		{"per-bucket interval", pool, []AuditOption{WithPerBucketInterval(time.Microsecond)}, "pglimit: WithPerBucketInterval: interval must be 0 or >= 1ms, got 1µs"},
		{"rule ids", pool, []AuditOption{WithRuleIDs(nil)}, "pglimit: WithRuleIDs: func is nil"},
		{"logger", pool, []AuditOption{WithAuditLogger(nil)}, "pglimit: WithAuditLogger: logger is nil"},
		{"two errors", pool, []AuditOption{WithQueueSize(0), WithBatchSize(0)}, "WithQueueSize: size must be >= 1, got 0\n" +
			"ratelimit: invalid option: pglimit: WithBatchSize: size must be >= 1, got 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAudit(tt.pool, tt.opts...)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("NewAudit = %v, want nil", err)
				}
				closeAudit(t, a)
				return
			}
			if err == nil {
				closeAudit(t, a)
				t.Fatalf("NewAudit = nil error, want %q", tt.want)
			}
			if a != nil {
				t.Errorf("NewAudit = %v, want a nil *Audit with the error", a)
			}
			if !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewAudit = %q, want core.ErrInvalidOption with %q", err, tt.want)
			}
		})
	}
}

func TestBucketKey(t *testing.T) {
	long := strings.Repeat("é", 300)
	tests := []struct {
		name, rule, identity string
		want                 string // "" for: check length and suffix only
	}{
		{"user", "per-user", "42", "per-user:42"},
		{"global", "global", "*", "global:*"},
		{"empty identity", "r", "", "r:"},
		{"exactly 256", "r", strings.Repeat("x", 254), "r:" + strings.Repeat("x", 254)},
		{"long", "per-user", long, ""},
		{"invalid utf-8", "r", "\xff\xfea", "r:\uFFFDa"},
		{"nul", "r", "a\x00b", "r:a\uFFFDb"},
		{"long invalid utf-8", "r", "\xff" + strings.Repeat("y", 300), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bucketKey(tt.rule, tt.identity)
			if tt.want != "" {
				if got != tt.want {
					t.Errorf("bucketKey(%q, %q) = %q, want %q", tt.rule, tt.identity, got, tt.want)
				}
				return
			}
			if n := len([]rune(got)); n != bucketKeyLen {
				t.Errorf("bucketKey(%q, long) has %d characters, want %d", tt.rule, n, bucketKeyLen)
			}
			if i := strings.LastIndexByte(got, '#'); i < 0 || len(got)-i != 17 || !strings.HasPrefix(got, tt.rule+":") {
				t.Errorf("bucketKey(%q, long) = %q, want the rule, a cut identity, '#' and 16 hex digits", tt.rule, got)
			}
			if other := bucketKey(tt.rule, tt.identity+"z"); other == got {
				t.Errorf("bucketKey gives %q for two identities, want distinct keys", got)
			}
		})
	}
}

func TestParseIP(t *testing.T) {
	tests := []struct {
		in, want string // want "" for NULL
	}{
		{"", ""},
		{"203.0.113.7", "203.0.113.7/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"fe80::1%eth0", "fe80::1/128"},
		{"2001:db8:1:2::/64", "2001:db8:1:2::/64"},
		{"not an ip", ""},
		{"203.0.113.7:443", ""},
	}
	for _, tt := range tests {
		p, ok := parseIP(tt.in)
		got := ""
		if ok {
			got = p.String()
		}
		if got != tt.want {
			t.Errorf("parseIP(%q) = %q, %v, want %q", tt.in, got, ok, tt.want)
		}
	}
}

// TestAdmit walks one bucket's per-bucket interval through named instants.
func TestAdmit(t *testing.T) {
	a, err := NewAudit(unreachablePool(t), WithPerBucketInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer closeAudit(t, a)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	ms := int64(time.Millisecond)
	steps := []struct {
		name           string
		rule, identity string
		at             int64
		want           bool
	}{
		{"t0 first", "r", "a", t0, true},
		{"t0 again", "r", "a", t0, false},
		{"t0 other identity", "r", "b", t0, true},
		{"t0 other rule", "s", "a", t0, true},
		{"t1 within", "r", "a", t0 + 999*ms, false},
		{"t2 interval over", "r", "a", t0 + 1000*ms, true},
		{"t3 within again", "r", "a", t0 + 1500*ms, false},
		{"t4 clock behind", "r", "a", t0, false},
	}
	for _, s := range steps {
		if got := a.admit(s.rule, s.identity, s.at); got != s.want {
			t.Errorf("%s: admit(%q, %q) = %v, want %v", s.name, s.rule, s.identity, got, s.want)
		}
	}
}

// TestObserveThinsAndDrops counts what Observe does with a flood it cannot
// write: the writer is stuck with the first row.
func TestObserveThinsAndDrops(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		opts []AuditOption
		// each request at t0 + i*step, users cycling over users
		n, users int
		step     time.Duration
		want     AuditStats // Enqueued, Dropped, Thinned; the rest unchecked
		approx   bool       // Thinned is random: check the sum and a range
	}{
		{"queue bound", []AuditOption{WithQueueSize(10)}, 100, 100, 0,
			// one in the writer's batch, ten queued
			AuditStats{Enqueued: 11, Dropped: 89}, false},
		{"per bucket", []AuditOption{WithPerBucketInterval(time.Second)}, 100, 5, 100 * time.Millisecond,
			// 20 rounds of 5 users over 10s...: every user every 500ms,
			// so each writes at 0s, 1s, ... (10 of 20 denials).
			AuditStats{Enqueued: 50, Thinned: 50}, false},
		{"sampling", []AuditOption{WithSampling(10)}, 2000, 2000, 0,
			AuditStats{Enqueued: 200, Thinned: 1800}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := append([]AuditOption{WithBatchSize(1)}, tt.opts...)
			a, err := NewAudit(stuckPool(t), opts...)
			if err != nil {
				t.Fatal(err)
			}
			l := newLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
			ctx := context.Background()
			for u := range tt.users { // each user's one admitted request
				if d, err := l.AllowAt(ctx, t0.Add(-time.Hour/2), core.Request{User: fmt.Sprint(u)}, 1); err != nil || !d.Allowed {
					t.Fatalf("first AllowAt(user %d) = %v, %v, want allowed", u, d.Allowed, err)
				}
			}
			taken := false
			for i := range tt.n {
				at := t0.Add(time.Duration(i/tt.users) * tt.step * time.Duration(tt.users))
				if d, err := l.AllowAt(ctx, at, core.Request{User: fmt.Sprint(i % tt.users)}, 1); err != nil || d.Allowed {
					t.Fatalf("AllowAt #%d = %v, %v, want denied", i, d.Allowed, err)
				}
				if !taken { // until the writer holds the first row queued
					waitFor(t, "the writer to take the first row", func() bool {
						st := a.Stats()
						return st.QueueDepth == 0 && st.Enqueued+st.Thinned+st.Dropped == int64(i+1)
					})
					taken = a.Stats().Enqueued == 1
				}
			}
			got := a.Stats()
			if tt.approx {
				if got.Enqueued+got.Thinned+got.Dropped != int64(tt.n) || got.Enqueued < tt.want.Enqueued/2 || got.Enqueued > tt.want.Enqueued*2 {
					t.Errorf("Stats() = %+v, want Enqueued+Thinned = %d, Enqueued about %d", got, tt.n, tt.want.Enqueued)
				}
			} else if got.Enqueued != tt.want.Enqueued || got.Dropped != tt.want.Dropped || got.Thinned != tt.want.Thinned {
				t.Errorf("Stats() = %+v, want Enqueued %d, Dropped %d, Thinned %d", got, tt.want.Enqueued, tt.want.Dropped, tt.want.Thinned)
			}
			closeStuck(t, a)
			after := a.Stats()
			if after.Failed != got.Enqueued || after.Enqueued != got.Enqueued || after.Written != 0 || after.QueueDepth != 0 {
				t.Errorf("after Close: Stats() = %+v, want Failed = Enqueued = %d (every row), nothing written or queued", after, got.Enqueued)
			}
			if d, err := l.AllowAt(ctx, t0.Add(time.Minute), core.Request{User: "0"}, 1); err != nil || d.Allowed {
				t.Fatalf("AllowAt after Close = %v, %v, want denied", d.Allowed, err)
			}
			if a.Stats().Dropped+a.Stats().Thinned == after.Dropped+after.Thinned {
				t.Errorf("a denial after Close was neither dropped nor thinned: Stats() = %+v", a.Stats())
			}
		})
	}
}

// TestAuditDatabaseHangs: a database that takes the connection and never
// answers holds a batch for WithRetryTimeout, the attempt under way
// included; the batch is then counted as failed, the writer goes on to the
// next, and Close returns.
func TestAuditDatabaseHangs(t *testing.T) {
	const timeout = 200 * time.Millisecond
	a, err := NewAudit(stuckPool(t), WithFlushInterval(time.Millisecond), WithRetryTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, a, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: oneThenDeny})
	deny := func() {
		if d, err := l.Allow(context.Background(), core.Request{User: "u"}); err != nil || d.Allowed {
			t.Fatalf("Allow = %v, %v, want denied", d.Allowed, err)
		}
	}
	l.Allow(context.Background(), core.Request{User: "u"}) //nolint:errcheck // the one admitted
	start := time.Now()
	deny()
	waitFor(t, "the first batch to fail", func() bool { return a.Stats().Failed == 1 })
	// A second of slack for a loaded machine; without a bound the batch
	// never fails.
	if took := time.Since(start); took > timeout+time.Second {
		t.Errorf("the first batch failed %v after its row, want about WithRetryTimeout (%v)", took, timeout)
	}
	deny()
	closeAudit(t, a)
	if st := a.Stats(); st.Failed != 2 || st.WriteErrors != 2 || st.Written != 0 {
		t.Errorf("after Close: Stats() = %+v, want both batches failed, one write error each", st)
	}
}

// waitFor polls cond, which watches a goroutine of the code under test,
// until it holds or 30s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAuditCollectMetrics(t *testing.T) {
	a, err := NewAudit(stuckPool(t), WithQueueSize(2), WithBatchSize(1))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStuck(t, a)
	l := newLimiter(t, a, core.Rule{Name: "g", Scope: core.ScopeGlobal, Limit: oneThenDeny})
	for i := range 6 { // one allowed, one taken by the writer, two queued, two dropped
		l.Allow(context.Background(), core.Request{}) //nolint:errcheck // counted below
		if i == 1 {
			waitFor(t, "the writer to take the first row", func() bool { st := a.Stats(); return st.QueueDepth == 0 && st.Enqueued == 1 })
		}
	}
	got := map[string]float64{}
	kinds := map[string]core.MetricKind{}
	var src core.MetricSource = a
	src.CollectMetrics(func(m core.Metric) { got[m.Name], kinds[m.Name] = m.Value, m.Kind })
	want := map[string]float64{
		"audit_rows_enqueued_total": 3, "audit_rows_written_total": 0, "audit_rows_dropped_total": 2,
		"audit_queue_depth":        2,
		"audit_rows_thinned_total": 0, "audit_rows_failed_total": 0, "audit_write_errors_total": 0,
	}
	for name, v := range want {
		kind := core.Counter
		if name == "audit_queue_depth" {
			kind = core.Gauge
		}
		if got[name] != v || kinds[name] != kind {
			t.Errorf("%s = %v (kind %v), want %v (kind %v)", name, got[name], kinds[name], v, kind)
		}
	}
	if len(got) != 7 {
		t.Errorf("CollectMetrics emitted %d metrics, want 7", len(got))
	}
}
