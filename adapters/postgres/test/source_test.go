package pglimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/pgtest"
	"github.com/bucketry/ratelimit/rules"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// seedRules are the example rows of the seed's RateLimitRule table.
const seedRules = `INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, plan) VALUES
	('user:{user_id}', 'user', 10, 50, 'free'),
	('user:{user_id}', 'user', 100, 500, 'pro'),
	('endpoint:/api/search', 'endpoint', 1000, 2000, NULL),
	('global', 'global', 50000, 100000, NULL)`

var freePlan = pglimit.WithPlans(core.Plans{Default: "free"})

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// newSource starts a source, closed at the end of the test.
func newSource(t testing.TB, pool *pgxpool.Pool, l *core.Limiter, opts ...pglimit.Option) *pglimit.Source {
	t.Helper()
	s, err := pglimit.NewSource(context.Background(), pool, l, opts...)
	if err != nil {
		t.Fatalf("NewSource: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond every few milliseconds until it holds, and fails t
// after timeout. These tests run against a real server, whose timing no
// fake clock controls.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// rule returns the rule of p named name for plan, failing t if absent.
func rule(t testing.TB, p *core.Policy, name, plan string) core.Rule {
	t.Helper()
	for _, r := range p.Rules() {
		if r.Name == name && r.Plan == plan {
			return r
		}
	}
	t.Fatalf("policy has no rule %q for plan %q; it has %v", name, plan, names(p))
	return core.Rule{}
}

func names(p *core.Policy) []string {
	var n []string
	for _, r := range p.Rules() {
		n = append(n, r.Name+"/"+r.Plan)
	}
	return n
}

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// count returns how many records of level have a message starting with
// prefix.
func (r *recorder) count(level slog.Level, prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Level == level && strings.HasPrefix(rec.Message, prefix) {
			n++
		}
	}
	return n
}

func (r *recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, rec := range r.records {
		fmt.Fprintf(&b, "%v %s\n", rec.Level, rec.Message)
	}
	return b.String()
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	pool, _ := newDB(t)
	ctx := context.Background()
	// Again: nothing changes, nothing fails.
	if err := pglimit.Migrate(ctx, pool); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	exec(t, pool, seedRules)
	// The trigger announces every change, once per statement.
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN "+pglimit.Channel); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sql, op string }{
		{"UPDATE RateLimitRule SET burst_capacity = burst_capacity + 1", "UPDATE"},
		{"INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity) VALUES ('ip:{ip}', 'ip', 5, 5)", "INSERT"},
		{"DELETE FROM RateLimitRule WHERE scope = 'ip'", "DELETE"},
	} {
		exec(t, pool, tc.sql)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil || n.Channel != pglimit.Channel || n.Payload != tc.op {
			t.Fatalf("after %s: notification %+v, %v; want %s on %s", tc.sql, n, err, tc.op, pglimit.Channel)
		}
	}
	// Two rows for every plan with one key pattern would be one rule twice.
	_, err = pool.Exec(ctx, "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity) VALUES ('global', 'global', 1, 1)")
	if err == nil || !strings.Contains(err.Error(), "23505") {
		t.Errorf("a second 'global' row for every plan: %v, want a unique violation (23505)", err)
	}
	// Violations take string user ids and outlive their rule.
	exec(t, pool, `INSERT INTO RateLimitViolation (bucket_key, user_id, ip_address, endpoint, tokens_at_time, rule_id)
		SELECT 'rl:user.free:alice@example.com', 'alice@example.com', '192.0.2.1', '/api/search', 0.5, rule_id
		FROM RateLimitRule WHERE plan = 'free'`)
	exec(t, pool, "DELETE FROM RateLimitRule WHERE plan = 'free'")
	var user string
	var ruleID *int64
	if err := pool.QueryRow(ctx, "SELECT user_id, rule_id FROM RateLimitViolation").Scan(&user, &ruleID); err != nil || user != "alice@example.com" || ruleID != nil {
		t.Errorf("violation after its rule was deleted: user %q rule %v, %v; want alice@example.com, NULL", user, ruleID, err)
	}
	if !strings.Contains(pglimit.MigrationSQL(), "CREATE TABLE IF NOT EXISTS RateLimitRule") {
		t.Error("MigrationSQL does not create RateLimitRule")
	}
}

// A database made from the seed's own definition is upgraded in place.
func TestMigrateUpgradesSeedTables(t *testing.T) {
	t.Parallel()
	url, err := shared.CreateDatabase("seed_upgrade")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	exec(t, pool, `CREATE TABLE RateLimitRule (
		rule_id BIGSERIAL PRIMARY KEY, key_pattern VARCHAR(128) NOT NULL, scope VARCHAR(32) NOT NULL,
		rate_per_second FLOAT NOT NULL, burst_capacity INT NOT NULL, plan VARCHAR(32),
		is_active BOOLEAN NOT NULL DEFAULT TRUE, description TEXT,
		created_at TIMESTAMPTZ NOT NULL DEFAULT NOW(), UNIQUE (key_pattern, plan));
	CREATE TABLE RateLimitViolation (
		violation_id BIGSERIAL PRIMARY KEY, bucket_key VARCHAR(256) NOT NULL, user_id BIGINT,
		ip_address INET, endpoint VARCHAR(255), requested_at TIMESTAMPTZ NOT NULL DEFAULT NOW(),
		tokens_at_time FLOAT NOT NULL, rule_id BIGINT REFERENCES RateLimitRule(rule_id))`)
	exec(t, pool, seedRules)
	exec(t, pool, "INSERT INTO RateLimitViolation (bucket_key, user_id, tokens_at_time) VALUES ('rl:user:42', 42, 0)")
	if err := pglimit.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate over the seed's tables: %v", err)
	}
	var user string
	if err := pool.QueryRow(ctx, "SELECT user_id FROM RateLimitViolation").Scan(&user); err != nil || user != "42" {
		t.Fatalf("user_id after the upgrade = %q, %v; want the text \"42\"", user, err)
	}
	exec(t, pool, "INSERT INTO RateLimitRule (key_pattern, scope, burst_capacity, algorithm, window_length) VALUES ('ip:{ip}', 'ip', 10, 'fixed_window', '1 minute')")
	s := newSource(t, pool, newLimiter(t, nil), freePlan)
	if got := s.Stats().Rules; got != 5 {
		t.Errorf("Stats().Rules = %d, want the 4 seed rows and the window rule", got)
	}
}

func TestLoadAtStart(t *testing.T) {
	t.Parallel()
	pool, _ := newDB(t)
	exec(t, pool, seedRules)
	exec(t, pool, `INSERT INTO RateLimitRule (name, key_pattern, scope, algorithm, rate, period, rate_per_second, burst_capacity,
			window_length, max_wait, routes, shadow, is_active, plan) VALUES
		('per-day', 'user:{uid}', 'user', 'token_bucket', 1000, '1 day', NULL, 1000, NULL, NULL, '{}', false, true, 'free'),
		('shape', 'ip:{ip}', 'ip', 'shaping', NULL, NULL, 0.5, 2, NULL, '250 ms', '{}', false, true, NULL),
		('fixed', 'dim:{tenant}', 'dim:tenant', 'fixed_window', NULL, NULL, NULL, 100, '1 minute', NULL, '{}', false, true, NULL),
		('sliding', 'endpoint:{endpoint}', 'endpoint', 'sliding_window', NULL, NULL, NULL, 10, '10 s', NULL, '{"GET /search", "POST"}', true, true, NULL),
		('log', 'user:{u}', 'user', 'sliding_log', NULL, NULL, NULL, 5, '1 s', NULL, '{}', false, false, 'pro')`)
	rec := &recorder{}
	l := newLimiter(t, nil)
	s := newSource(t, pool, l, freePlan, pglimit.WithLogger(slog.New(rec)))
	p := l.Policy()
	if got := len(p.Rules()); got != 9 {
		t.Fatalf("policy has %d rules %v, want 9", got, names(p))
	}
	if got := p.Plans(); got != (core.Plans{Default: "free"}) {
		t.Errorf("Plans() = %+v, want the default plan free", got)
	}
	type want struct {
		alg    core.Algorithm
		rate   core.Rate
		burst  int64
		window time.Duration
		wait   time.Duration
		scope  core.Scope
		routes []string
		shadow bool
		off    bool
	}
	for _, tc := range []struct {
		name, plan string
		want       want
	}{
		{"user.free", "free", want{alg: core.AlgTokenBucket, rate: core.Rate{N: 10, Per: time.Second}, burst: 50, scope: core.ScopeUser}},
		{"user.pro", "pro", want{alg: core.AlgTokenBucket, rate: core.Rate{N: 100, Per: time.Second}, burst: 500, scope: core.ScopeUser}},
		{"endpoint.api.search", "", want{alg: core.AlgTokenBucket, rate: core.Rate{N: 1000, Per: time.Second}, burst: 2000, scope: core.ScopeEndpoint, routes: []string{"/api/search"}}},
		{"global", "", want{alg: core.AlgTokenBucket, rate: core.Rate{N: 50000, Per: time.Second}, burst: 100000, scope: core.ScopeGlobal}},
		{"per-day", "free", want{alg: core.AlgTokenBucket, rate: core.Rate{N: 1000, Per: 24 * time.Hour}, burst: 1000, scope: core.ScopeUser}},
		{"shape", "", want{alg: core.AlgShaping, rate: core.Rate{N: 1, Per: 2 * time.Second}, burst: 2, wait: 250 * time.Millisecond, scope: core.ScopeIP}},
		{"fixed", "", want{alg: core.AlgFixedWindow, burst: 100, window: time.Minute, scope: core.Dimension("tenant")}},
		{"sliding", "", want{alg: core.AlgSlidingWindow, burst: 10, window: 10 * time.Second, scope: core.ScopeEndpoint, routes: []string{"GET /search", "POST"}, shadow: true}},
		{"log", "pro", want{alg: core.AlgSlidingLog, burst: 5, window: time.Second, scope: core.ScopeUser, off: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rule(t, p, tc.name, tc.plan)
			lim := r.Limit
			got := want{alg: lim.Algorithm(), burst: lim.Burst(), scope: r.Scope, routes: r.Routes, shadow: r.Shadow, off: r.Disabled}
			if lim.Algorithm() == core.AlgTokenBucket || lim.Algorithm() == core.AlgShaping {
				got.rate = lim.Rate()
			} else {
				got.window = lim.Window()
			}
			if lim.Algorithm() == core.AlgShaping {
				got.wait = lim.MaxWait()
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("rule %s/%s = %+v, want %+v", tc.name, tc.plan, got, tc.want)
			}
			id, ok := s.RuleID(tc.name, tc.plan)
			if !ok || id <= 0 {
				t.Errorf("RuleID(%q, %q) = %d, %v; want the row's id", tc.name, tc.plan, id, ok)
			}
		})
	}
	if id, ok := s.RuleID("user.free", "pro"); ok {
		t.Errorf("RuleID(user.free, pro) = %d, true; want false", id)
	}
	st := s.Stats()
	if st.Rules != 9 || st.Failures != 0 || st.LastSuccess.IsZero() || !st.Listening || st.FromFile {
		t.Errorf("Stats() = %+v; want 9 rules, no failure, a success, listening, not from a file", st)
	}
	metrics := map[string]float64{}
	s.CollectMetrics(func(m core.Metric) {
		if len(m.Labels) != 2 || m.Labels[0] != "source" || m.Labels[1] != "postgres" {
			t.Errorf("metric %s has labels %q, want source=postgres", m.Name, m.Labels)
		} else if !core.IsMetricLabel(m.Labels[0]) {
			t.Errorf("metric %s has the label %q, which core.IsMetricLabel does not name: the metrics adapters would take it as a constant label", m.Name, m.Labels[0])
		}
		metrics[m.Name] = m.Value
	})
	if metrics["rules_loaded"] != 9 || metrics["rules_listening"] != 1 || metrics["rules_reload_failures_total"] != 0 ||
		metrics["rules_last_success_seconds"] != float64(st.LastSuccess.UnixNano())/1e9 {
		t.Errorf("CollectMetrics = %v; want 9 rules loaded, listening, no failure, the last success", metrics)
	}
	if rec.count(slog.LevelInfo, "pglimit: rules loaded") != 1 {
		t.Errorf("log:\n%s\nwant one \"rules loaded\"", rec)
	}
	// A reload that finds the same rows changes nothing.
	before := l.Policy()
	if err := s.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); l.Policy() != before || st.Unchanged != 1 || st.Reloads != 0 {
		t.Errorf("after a Reload of the same rows: policy replaced %v, Stats %+v; want the same policy, Unchanged 1", l.Policy() != before, st)
	}
}

// Bad rows at start are an error naming each row by rule_id and column.
func TestBadRowsAtStart(t *testing.T) {
	t.Parallel()
	pool, _ := newDB(t)
	good := "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity) VALUES ('global', 'global', 10, 10);"
	for _, tc := range []struct {
		name     string
		rows     string
		opts     []pglimit.Option
		column   string // of the RowError; "" for an error that is not one
		sentinel error
		message  string
	}{
		{"zero burst", "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity) VALUES ('ip:{ip}', 'ip', 1, 0)",
			nil, "burst_capacity", core.ErrInvalidBurst, `(key_pattern "ip:{ip}"): burst_capacity: must be >= 1, got 0`},
		{"unknown algorithm", "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, algorithm) VALUES ('ip:{ip}', 'ip', 1, 1, 'leaky')",
			nil, "algorithm", rules.ErrInvalidSpec, `algorithm: unknown algorithm "leaky"`},
		{"NaN rate", "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity) VALUES ('ip:{ip}', 'ip', 'NaN', 1)",
			nil, "rate_per_second", core.ErrInvalidRate, "rate_per_second: must be a finite number"},
		{"months", "INSERT INTO RateLimitRule (key_pattern, scope, rate, period, burst_capacity) VALUES ('ip:{ip}', 'ip', 1, '1 month', 1)",
			nil, "period", rules.ErrInvalidSpec, "period: an interval of months has no fixed length"},
		{"window on a bucket", "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, window_length) VALUES ('ip:{ip}', 'ip', 1, 1, '1 s')",
			nil, "window_length", rules.ErrInvalidSpec, "window_length: token_bucket has no window"},
		{"scope disagrees", "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, plan) VALUES ('user:{id}', 'ip', 1, 1, 'free')",
			nil, "scope", rules.ErrInvalidSpec, `(key_pattern "user:{id}", plan "free"): scope: "ip" disagrees`},
		{"duplicate name", "INSERT INTO RateLimitRule (name, key_pattern, scope, rate_per_second, burst_capacity) VALUES ('x', 'ip:{ip}', 'ip', 1, 1), ('x', 'user:{id}', 'user', 1, 1)",
			nil, "name", core.ErrDuplicateRule, `(key_pattern "user:{id}"): name: "x" is also rule_id `},
		// A name may repeat on distinct plans, not on a plan and every plan.
		{"duplicate name on every plan", `INSERT INTO RateLimitRule (name, key_pattern, scope, rate_per_second, burst_capacity, plan) VALUES
			('x', 'user:{id}', 'user', 1, 1, 'free'), ('x', 'ip:{ip}', 'ip', 1, 1, 'pro'), ('x', 'endpoint:{endpoint}', 'endpoint', 1, 1, NULL)`,
			[]pglimit.Option{freePlan}, "name", core.ErrDuplicateRule, `(key_pattern "endpoint:{endpoint}"): name: "x" is also rule_id `},
		{"plans without WithPlans", "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, plan) VALUES ('user:{id}', 'user', 1, 1, 'free')",
			nil, "", core.ErrInvalidPlan, "pglimit: WithPlans: missing: the rules name plans"},
		{"default plan of no row", "",
			[]pglimit.Option{freePlan}, "", core.ErrInvalidPlan, `pglimit: WithPlans: "free" is not the plan of any rule`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := pool.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// One at a time on the shared table.
			defer conn.Release()
			exec(t, pool, "TRUNCATE RateLimitRule CASCADE; "+good+tc.rows)
			s, err := pglimit.NewSource(context.Background(), pool, newLimiter(t, nil), tc.opts...)
			if err == nil {
				s.Close()
				t.Fatalf("NewSource = nil error, want one about %s", tc.name)
			}
			if !errors.Is(err, tc.sentinel) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("NewSource error = %q; want one wrapping %v containing %q", err, tc.sentinel, tc.message)
			}
			re, isRow := errors.AsType[*pglimit.RowError](err)
			if tc.column == "" {
				if isRow {
					t.Errorf("NewSource error is a *RowError %+v, want a policy-level error", re)
				}
				return
			}
			if !isRow || re.Column != tc.column || re.RuleID <= 0 {
				t.Fatalf("NewSource error %q: RowError %+v; want column %s and a rule_id", err, re, tc.column)
			}
			var last int64
			if err := pool.QueryRow(context.Background(), "SELECT max(rule_id) FROM RateLimitRule").Scan(&last); err != nil {
				t.Fatal(err)
			}
			if re.RuleID != last || !strings.HasPrefix(err.Error(), fmt.Sprintf("pglimit: RateLimitRule rule_id %d ", last)) {
				t.Errorf("NewSource error %q names rule_id %d, want the bad row, %d", err, re.RuleID, last)
			}
			if !errors.Is(err, core.ErrDuplicateRule) {
				return
			}
			// Each clash here is with the first row named x.
			var other int64
			if err := pool.QueryRow(context.Background(), "SELECT min(rule_id) FROM RateLimitRule WHERE name = 'x'").Scan(&other); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("is also rule_id %d's", other); !strings.Contains(err.Error(), want) {
				t.Errorf("NewSource error %q, want the row it clashes with named: %q", err, want)
			}
		})
	}
	t.Run("every bad row", func(t *testing.T) {
		exec(t, pool, `TRUNCATE RateLimitRule CASCADE;
			INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity) VALUES
			('ip:{ip}', 'ip', 1, 0), ('user:{id}', 'user', -1, 1), ('global', 'global', 1, 1)`)
		_, err := pglimit.NewSource(context.Background(), pool, newLimiter(t, nil))
		if err == nil || strings.Count(err.Error(), "pglimit: RateLimitRule rule_id") != 2 ||
			!errors.Is(err, core.ErrInvalidBurst) || !errors.Is(err, core.ErrInvalidRate) {
			t.Fatalf("NewSource with two bad rows: %v; want both named", err)
		}
	})
}

// liveUpdate changes the global rule's burst with sql while 64 goroutines
// decide, and returns how long after the statement was sent the first
// decision showed burst want. It fails t if any decision failed. Each
// goroutine yields between decisions, as a request handler does when it
// waits on its connection: 64 goroutines that never yield keep both cores
// and leave the scheduler's global queue, where the source's goroutine
// lands when its database answers, to be looked at a few times a second,
// which would measure the Go scheduler, not the source.
func liveUpdate(t *testing.T, l *core.Limiter, pool *pgxpool.Pool, want int64, sql string) time.Duration {
	t.Helper()
	var (
		stop      atomic.Bool
		failed    atomic.Int64
		decisions atomic.Int64
		seen      atomic.Int64 // unix nanoseconds of the first decision with the new burst
		wg        sync.WaitGroup
	)
	for g := range 64 {
		wg.Go(func() {
			req := core.Request{User: fmt.Sprint("u", g)}
			for !stop.Load() {
				d, err := l.Allow(context.Background(), req)
				decisions.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				if d.Limit == want {
					seen.CompareAndSwap(0, time.Now().UnixNano())
				}
				runtime.Gosched()
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Errorf("%d of %d decisions failed, want 0", n, decisions.Load())
		}
	}()
	waitFor(t, "decisions under way", 5*time.Second, func() bool { return decisions.Load() > 1000 })
	start := time.Now()
	exec(t, pool, sql)
	waitFor(t, fmt.Sprintf("a decision with burst %d", want), 5*time.Second, func() bool { return seen.Load() != 0 })
	return time.Unix(0, seen.Load()).Sub(start)
}

// An UPDATE reaches the decisions of a busy limiter through NOTIFY well
// within a second, with no failed decision; the interval alone would take
// 30s.
func TestUpdateChangesLivePolicy(t *testing.T) {
	t.Parallel()
	pool, _ := newDB(t)
	exec(t, pool, "INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity) VALUES ('global', 'global', 1000000, 1000000)")
	l := newLimiter(t, nil)
	s := newSource(t, pool, l)
	var lat []time.Duration
	for i := range 5 {
		burst := int64(2000000 + i)
		lat = append(lat, liveUpdate(t, l, pool, burst, fmt.Sprintf("UPDATE RateLimitRule SET burst_capacity = %d", burst)))
	}
	slices.Sort(lat)
	t.Logf("UPDATE to the first decision with the new rule, 5 updates, 64 goroutines deciding: min %v, median %v, max %v", lat[0], lat[2], lat[4])
	if lat[4] > time.Second {
		t.Errorf("slowest update took %v to reach the decisions, want < 1s", lat[4])
	}
	if st := s.Stats(); st.Reloads != 5 || st.Failures != 0 {
		t.Errorf("Stats() = %+v, want 5 reloads and no failure", st)
	}
}

// A bad row, or a policy the limiter refuses, never replaces the policy in
// force; the failures are counted and logged without flooding, and the
// next good change is applied.
func TestBadRowKeepsPolicy(t *testing.T) {
	t.Parallel()
	pool, _ := newDB(t)
	exec(t, pool, seedRules)
	rec := &recorder{}
	l := newLimiter(t, nil)
	s := newSource(t, pool, l, freePlan, pglimit.WithLogger(slog.New(rec)))
	good := l.Policy()

	exec(t, pool, "UPDATE RateLimitRule SET burst_capacity = 0 WHERE key_pattern = 'global'")
	waitFor(t, "the bad row noticed", time.Second, func() bool { return s.Stats().Failures == 1 })
	st := s.Stats()
	re, ok := errors.AsType[*pglimit.RowError](st.LastError)
	if l.Policy() != good || !ok || re.Column != "burst_capacity" || !errors.Is(st.LastError, core.ErrInvalidBurst) {
		t.Fatalf("after burst_capacity 0: policy replaced %v, LastError %v; want the good policy kept and the row named", l.Policy() != good, st.LastError)
	}
	exec(t, pool, "UPDATE RateLimitRule SET burst_capacity = -1 WHERE key_pattern = 'global'")
	waitFor(t, "the second bad row noticed", time.Second, func() bool { return s.Stats().Failures == 2 })
	if err := s.Reload(context.Background()); err == nil || !errors.Is(err, core.ErrInvalidBurst) {
		t.Errorf("Reload with a bad row = %v, want the row's error", err)
	}
	if n := rec.count(slog.LevelError, "pglimit: loading the rules failed"); n != 1 {
		t.Errorf("3 failed loads logged %d errors, want 1 (a minute apart at most); log:\n%s", n, rec)
	}

	// The limiter's own checks are obeyed too.
	remove, err := l.AddPolicyCheck(func(p *core.Policy) error {
		for _, r := range p.Rules() {
			if r.Name == "forbidden" {
				return errors.New("test: rule forbidden refused")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	exec(t, pool, "UPDATE RateLimitRule SET burst_capacity = 7, name = 'forbidden' WHERE key_pattern = 'global'")
	waitFor(t, "the refused policy noticed", time.Second, func() bool { return s.Stats().Failures == 4 })
	if err := s.Stats().LastError; l.Policy() != good || err == nil || !strings.Contains(err.Error(), "pglimit: the limiter refused the rules of RateLimitRule") || !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("after a refused policy: replaced %v, LastError %v", l.Policy() != good, err)
	}

	exec(t, pool, "UPDATE RateLimitRule SET name = NULL WHERE key_pattern = 'global'")
	waitFor(t, "the fixed row applied", time.Second, func() bool { return l.Policy() != good })
	if b := rule(t, l.Policy(), "global", "").Limit.Burst(); b != 7 {
		t.Errorf("global burst after the fix = %d, want 7", b)
	}
	if rec.count(slog.LevelInfo, "pglimit: rules load again") != 1 || rec.count(slog.LevelInfo, "pglimit: rules reloaded") != 1 {
		t.Errorf("log after the fix:\n%s\nwant one \"rules load again\" and one \"rules reloaded\"", rec)
	}
	if st := s.Stats(); st.Reloads != 1 || st.Failures != 4 {
		t.Errorf("Stats() = %+v, want 1 reload and 4 failures", st)
	}
}

// startStoppable starts a server of the test's own, migrated, with the
// seed's rules, and a pool on it.
func startStoppable(t *testing.T) (*pgtest.Server, *pgxpool.Pool) {
	t.Helper()
	srv := pgtest.Start(t)
	pool := openMigrated(t, srv.URL())
	exec(t, pool, seedRules)
	return srv, pool
}

func TestDatabaseDownAtStart(t *testing.T) {
	t.Parallel()
	srv, pool := startStoppable(t)
	srv.Stop()

	l := newLimiter(t, nil)
	before := l.Policy()
	_, err := pglimit.NewSource(context.Background(), pool, l, freePlan)
	if err == nil || !strings.HasPrefix(err.Error(), "pglimit: loading RateLimitRule: ") {
		t.Fatalf("NewSource with the database down = %v, want a loading error", err)
	}
	if l.Policy() != before {
		t.Error("a failed NewSource changed the policy")
	}

	// With a fallback file, the source starts from it and switches to the
	// database once it is back.
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte("rules:\n  - name: file-global\n    scope: global\n    rate_per_second: 1\n    burst_capacity: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s := newSource(t, pool, l, freePlan, pglimit.WithFallbackFile(file), pglimit.WithLogger(slog.New(rec)),
		pglimit.WithReconnectBackoff(20*time.Millisecond, 200*time.Millisecond))
	st := s.Stats()
	if !st.FromFile || st.Rules != 1 || st.Listening || st.LastError == nil {
		t.Fatalf("Stats() started from the file = %+v; want FromFile, 1 rule, not listening, the database's error", st)
	}
	rule(t, l.Policy(), "file-global", "")
	if rec.count(slog.LevelWarn, "pglimit: started from the fallback file") != 1 {
		t.Errorf("log:\n%s\nwant a warning about the fallback file", rec)
	}
	srv.Restart(t)
	d := waitFor(t, "the database's rules after its restart", 10*time.Second, func() bool { return !s.Stats().FromFile })
	t.Logf("database's rules in force %v after the restart", d)
	rule(t, l.Policy(), "user.free", "free")

	// A fallback file that fails too: both errors.
	srv.Stop()
	_, err = pglimit.NewSource(context.Background(), pool, newLimiter(t, nil), pglimit.WithFallbackFile(filepath.Join(t.TempDir(), "missing.yaml")))
	if err == nil || !strings.Contains(err.Error(), "pglimit: loading RateLimitRule") || !strings.Contains(err.Error(), "pglimit: WithFallbackFile: ") {
		t.Errorf("NewSource with the database down and no file = %v, want both errors", err)
	}
}

// The database restarted under a running source: loads fail meanwhile,
// logged once; the listener reconnects by itself and notifications work
// again.
func TestDatabaseRestarted(t *testing.T) {
	t.Parallel()
	srv, pool := startStoppable(t)
	exec(t, pool, "UPDATE RateLimitRule SET burst_capacity = 1 WHERE key_pattern = 'global'")
	rec := &recorder{}
	l := newLimiter(t, nil)
	// The default interval, 30s: only the listener can make the source
	// reload within this test.
	s := newSource(t, pool, l, freePlan, pglimit.WithLogger(slog.New(rec)),
		pglimit.WithReconnectBackoff(20*time.Millisecond, 100*time.Millisecond), pglimit.WithTimeout(time.Second))
	good := l.Policy()

	srv.Stop()
	waitFor(t, "the listener noticing", 5*time.Second, func() bool { return !s.Stats().Listening })
	for range 3 {
		if err := s.Reload(context.Background()); err == nil {
			t.Fatal("Reload with the database down = nil, want an error")
		}
	}
	// Let the listener retry a few times.
	time.Sleep(500 * time.Millisecond)
	if l.Policy() != good {
		t.Error("failed loads replaced the policy")
	}
	if n, w := rec.count(slog.LevelError, "pglimit: loading the rules failed"), rec.count(slog.LevelWarn, "pglimit: not listening"); n != 1 || w != 1 {
		t.Errorf("while down: %d errors and %d warnings logged, want 1 each; log:\n%s", n, w, rec)
	}

	srv.Restart(t)
	d := waitFor(t, "the listener back", 10*time.Second, func() bool { return s.Stats().Listening })
	t.Logf("listening again %v after the restart", d)
	// The reconnection's own reload.
	waitFor(t, "the reload after reconnecting", 5*time.Second, func() bool { return s.Stats().Unchanged >= 1 })
	lat := liveUpdate(t, l, pool, 9, "UPDATE RateLimitRule SET burst_capacity = 9 WHERE key_pattern = 'global'")
	t.Logf("after the restart, UPDATE to the first decision with the new rule: %v", lat)
	if lat > time.Second {
		t.Errorf("after the restart an update took %v, want < 1s", lat)
	}
	st := s.Stats()
	if st.Reconnects < 1 || st.Failures != 3 || st.Reloads != 1 {
		t.Errorf("Stats() = %+v; want a reconnect, 3 failures, 1 reload", st)
	}
	if rec.count(slog.LevelInfo, "pglimit: listening again") != 1 || rec.count(slog.LevelInfo, "pglimit: rules load again") != 1 {
		t.Errorf("log:\n%s\nwant the recoveries logged once each", rec)
	}
}

// sourceGoroutines returns the stacks of goroutines running this package's
// or pgx's code.
func sourceGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "ratelimit/adapters/postgres.") || strings.Contains(g, "github.com/jackc/") {
			if !strings.Contains(g, "sourceGoroutines") {
				found = append(found, g)
			}
		}
	}
	return found
}

// Close stops every goroutine and closes the listener's connection, even
// while the listener is reconnecting. Not parallel: it counts goroutines.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	for _, tc := range []struct {
		name string
		down bool
	}{{"listening", false}, {"reconnecting", true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, pool := startStoppable(t)
			s, err := pglimit.NewSource(context.Background(), pool, newLimiter(t, nil), freePlan,
				pglimit.WithInterval(10*time.Millisecond), pglimit.WithReconnectBackoff(10*time.Millisecond, 10*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if tc.down {
				srv.Stop()
				waitFor(t, "the listener noticing", 5*time.Second, func() bool { return !s.Stats().Listening })
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s.Close() // again: nothing
			if err := s.Reload(context.Background()); !errors.Is(err, pglimit.ErrClosed) {
				t.Errorf("Reload after Close = %v, want ErrClosed", err)
			}
			if s.Stats().Listening {
				t.Error("Stats().Listening after Close")
			}
			pool.Close()
			var left []string
			deadline := time.Now().Add(5 * time.Second)
			for left = sourceGoroutines(); len(left) > 0 && time.Now().Before(deadline); left = sourceGoroutines() {
				time.Sleep(10 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Errorf("%d goroutines left after Close and pool.Close:\n%s", len(left), strings.Join(left, "\n\n"))
			}
		})
	}
}
