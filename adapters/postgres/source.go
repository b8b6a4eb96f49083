package pglimit

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/rules"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/001_rate_limit_rule.sql
var migrations embed.FS

const migrationFile = "migrations/001_rate_limit_rule.sql"

// Channel is the LISTEN/NOTIFY channel on which the trigger of the
// migration announces every change to RateLimitRule. A Source listens on
// it; a tool that changes the rules some other way (say, a table it
// rewrites) can NOTIFY it to have every Source reload at once.
const Channel = "ratelimit_rules"

// Defaults of a Source.
const (
	// DefaultInterval is how often a Source reloads the rules without a
	// notification: the bound on how stale they get when notifications
	// are lost (the listening connection down, a change made with the
	// trigger disabled).
	DefaultInterval = 30 * time.Second
	// DefaultTimeout bounds each load of the rules and each connection
	// attempt of the listener.
	DefaultTimeout = 5 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait between
	// attempts to reconnect the listener: it starts at the minimum and
	// doubles up to the maximum, with jitter.
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	// logEvery is the least time between two logged failures of one kind
	// (loading, listening), so that a database down for an hour writes
	// a line a minute, not one per attempt.
	logEvery = time.Minute
)

// ErrClosed is returned by Source.Reload after Close.
var ErrClosed = errors.New("pglimit: source closed")

// MigrationSQL returns the SQL of the schema: the RateLimitRule and
// RateLimitViolation tables and the trigger that notifies Channel, for a
// project that applies migrations with its own tool. It is idempotent and
// upgrades tables created from the seed's definition in place. Migrate runs
// it.
func MigrationSQL() string {
	b, err := migrations.ReadFile(migrationFile)
	if err != nil {
		// The file is embedded at build time: it cannot be missing.
		panic("pglimit: embedded migration missing: " + err.Error())
	}
	return string(b)
}

// Beginner starts a transaction: *pgxpool.Pool, *pgx.Conn and pgx.Tx (a
// savepoint) all do.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate applies MigrationSQL in one transaction on db, holding a
// transaction-level advisory lock so that instances starting together run
// it one after the other. Running it again does nothing. It fails with
// the server's error, wrapped; the schema is then as it was.
func Migrate(ctx context.Context, db Beginner) error {
	if db == nil || reflect.ValueOf(db).Kind() == reflect.Pointer && reflect.ValueOf(db).IsNil() {
		return fmt.Errorf("%w: pglimit: Migrate: db is nil", core.ErrInvalidOption)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pglimit: Migrate: %w", err)
	}
	// After Commit, Rollback does nothing.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('pglimit.migrate'))"); err != nil {
		return fmt.Errorf("pglimit: Migrate: %w", err)
	}
	// No arguments: pgx sends it with the simple protocol, which runs the
	// file's statements in order.
	if _, err := tx.Exec(ctx, MigrationSQL()); err != nil {
		return fmt.Errorf("pglimit: Migrate: %s: %w", migrationFile, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pglimit: Migrate: %w", err)
	}
	return nil
}

// Option configures NewSource. Options are applied in order over the
// defaults; a nil one is an error.
type Option interface{ apply(*config) }

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	interval   time.Duration
	timeout    time.Duration
	minBackoff time.Duration
	maxBackoff time.Duration
	logger     *slog.Logger
	fallback   string
	plans      core.Plans
	errs       []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: pglimit: "+format, append([]any{core.ErrInvalidOption}, args...)...))
}

// WithInterval sets how often the rules are reloaded without a
// notification (DefaultInterval). It must be > 0.
func WithInterval(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithInterval: must be > 0, got %v", d)
			return
		}
		c.interval = d
	})
}

// WithTimeout bounds each load of the rules and each connection attempt of
// the listener (DefaultTimeout). It must be > 0.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.fail("WithTimeout: must be > 0, got %v", d)
			return
		}
		c.timeout = d
	})
}

// WithReconnectBackoff bounds the wait between attempts to reconnect the
// listener (DefaultMinBackoff, DefaultMaxBackoff): it starts at minimum,
// doubles after each failed attempt up to maximum, and each wait is
// shortened by up to a fifth at random, so that instances do not reconnect
// in step. It needs 0 < minimum <= maximum.
func WithReconnectBackoff(minimum, maximum time.Duration) Option {
	return optionFunc(func(c *config) {
		if minimum <= 0 || maximum < minimum {
			c.fail("WithReconnectBackoff: need 0 < minimum <= maximum, got %v, %v", minimum, maximum)
			return
		}
		c.minBackoff, c.maxBackoff = minimum, maximum
	})
}

// WithLogger reports to l: the first load at Info, each reload that
// changed the policy at Info, failures at Error (loads) and Warn (the
// listener), at most one line a minute per kind while they go on, and the
// recovery at Info. The default is no logging; a nil l is an error.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l == nil {
			c.fail("WithLogger: nil logger")
			return
		}
		c.logger = l
	})
}

// WithFallbackFile names a rules file (YAML or JSON, see rules.Load) to
// start from when the rules cannot be loaded from the database at start,
// because it is unreachable or a row is bad: NewSource then puts the
// file's policy in force instead of failing, and the Source replaces it
// with the database's as soon as a load succeeds. A file that cannot be
// loaded either makes NewSource fail with both errors. Without it (the
// default), NewSource fails when the first load does. path must not be
// empty.
func WithFallbackFile(path string) Option {
	return optionFunc(func(c *config) {
		if path == "" {
			c.fail("WithFallbackFile: empty path")
			return
		}
		c.fallback = path
	})
}

// WithPlans says what a request of no plan or of a plan no row names gets
// (core.Plans: a default plan, or an error). The table has no place for
// it. Rows that name plans need it: the zero value, the default, suits
// rules for every plan only.
func WithPlans(p core.Plans) Option {
	return optionFunc(func(c *config) { c.plans = p })
}

// Stats counts a Source's loads and the state of its listener, for logs
// and metrics. The zero value is a source that has loaded nothing.
type Stats struct {
	// Reloads counts loads that put a changed policy in force, the
	// first not counted.
	Reloads int64
	// Unchanged counts loads that found the rules as they are in force.
	Unchanged int64
	// Failures counts loads that failed: the database unreachable or too
	// slow, a bad row, rows that do not make a policy together, or a
	// policy the limiter's SetPolicy refused. The policy in force stayed.
	Failures int64
	// LastError is the error of the last failed load; nil if none failed.
	LastError error
	// LastFailure is when the last load failed; zero if none did.
	LastFailure time.Time
	// LastSuccess is when the database last gave the rules in force (a
	// load that changed them or found them unchanged); zero if it never
	// did.
	LastSuccess time.Time
	// Rules is the number of rules of the policy in force.
	Rules int
	// FromFile reports that the policy in force came from
	// WithFallbackFile: no load from the database has succeeded yet.
	FromFile bool
	// Listening reports whether the connection listening on Channel is up.
	Listening bool
	// Reconnects counts the times the listener connected again after
	// losing its connection or failing to connect.
	Reconnects int64
}

// ruleKey identifies a rule of a policy: its name on one plan.
type ruleKey struct{ name, plan string }

// Source keeps a limiter's policy in step with the RateLimitRule table: see
// NewSource. Its methods are safe for concurrent use. It puts a policy in
// force and records it (Stats, RuleID) under one lock, so that the
// limiter's policy checks (core.Limiter.AddPolicyCheck), which SetPolicy
// runs, must not call the Source's methods.
type Source struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig // for the listener's own connection
	limiter *core.Limiter
	cfg     config
	log     *slog.Logger

	kick   chan struct{}   // a notification or a reconnection: reload now
	reqs   chan chan error // Reload
	cancel context.CancelFunc
	exited chan struct{} // closed when both goroutines have returned
	once   sync.Once

	// applied are the rows of the policy in force, nil when it is not
	// the database's; only the reloading goroutine touches it after
	// NewSource.
	applied []rules.Spec

	mu       sync.Mutex
	stats    Stats
	ids      map[ruleKey]int64
	lastLog  map[string]time.Time // per kind of failure: when one was last logged
	unlogged map[string]int       // per kind: failures since, not logged
}

// NewSource loads the rules of the RateLimitRule table through pool (see
// Migrate for the table), puts their policy in force on l with SetPolicy,
// and then keeps it in force: it reloads the rules every interval
// (WithInterval) and at once when the table's trigger notifies Channel, on
// a connection of its own, not one of pool's, which it reconnects with
// backoff whenever it is lost. A reload that finds the rules as they are
// does nothing.
//
// A load that fails (the database unreachable, a bad row, rows that do not
// make a policy together, a policy SetPolicy refuses) keeps the policy in
// force: the failure is counted in Stats and logged (WithLogger). At start
// it is an error, with every bad row named by its rule_id and column,
// unless WithFallbackFile gives a file to start from; nothing is then left
// running.
//
// ctx bounds the first load and the first connection of the listener; it
// is not kept. The limiter never waits for the database: decisions use the
// policy in force. Close stops the reloading; pool stays open, the
// caller's to close after.
func NewSource(ctx context.Context, pool *pgxpool.Pool, l *core.Limiter, opts ...Option) (*Source, error) {
	cfg := config{
		interval: DefaultInterval, timeout: DefaultTimeout,
		minBackoff: DefaultMinBackoff, maxBackoff: DefaultMaxBackoff,
	}
	for i, o := range opts {
		if o == nil {
			cfg.fail("NewSource: option %d is nil", i)
			continue
		}
		o.apply(&cfg)
	}
	if pool == nil {
		cfg.fail("NewSource: pool is nil")
	}
	if l == nil {
		cfg.fail("NewSource: limiter is nil")
	}
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, err
	}
	s := &Source{
		pool: pool, connCfg: pool.Config().ConnConfig, limiter: l, cfg: cfg, log: cfg.logger,
		kick: make(chan struct{}, 1), reqs: make(chan chan error), exited: make(chan struct{}),
		lastLog: make(map[string]time.Time), unlogged: make(map[string]int),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.load(ctx, true); err != nil {
		if cfg.fallback == "" {
			return nil, err
		}
		if ferr := s.startFromFile(); ferr != nil {
			return nil, errors.Join(err, ferr)
		}
	}
	bg, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// Listen before returning when the database lets us, so that a change
	// made right after NewSource is announced; else keep trying behind.
	first, err := s.connectListener(ctx)
	if err != nil {
		s.failed("listen", err)
	} else {
		s.setListening(true) // in Stats as NewSource returns, not once listenLoop runs
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.reloadLoop(bg) })
	wg.Go(func() { s.listenLoop(bg, first) })
	go func() {
		wg.Wait()
		close(s.exited)
	}()
	return s, nil
}

// startFromFile puts the fallback file's policy in force.
func (s *Source) startFromFile() error {
	p, err := rules.Load(s.cfg.fallback)
	if err != nil {
		return fmt.Errorf("pglimit: WithFallbackFile: %w", err)
	}
	if err := s.limiter.SetPolicy(p); err != nil {
		return fmt.Errorf("pglimit: WithFallbackFile: the limiter refused the rules of %s: %w", s.cfg.fallback, err)
	}
	s.mu.Lock()
	s.stats.FromFile, s.stats.Rules = true, len(p.Rules())
	s.mu.Unlock()
	s.log.Warn("pglimit: started from the fallback file; the database's rules replace them once they load",
		"file", s.cfg.fallback, "rules", len(p.Rules()), "error", s.Stats().LastError)
	return nil
}

// Reload loads the rules now and returns what the load returned: nil when
// the table's policy is in force, the error otherwise (the policy in force
// then stays). It waits for a load under way to finish first; ctx bounds
// the wait for its turn, the load itself is bounded by WithTimeout. After
// Close it returns ErrClosed.
func (s *Source) Reload(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case s.reqs <- reply:
	case <-s.exited:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the counters.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// RuleID returns the rule_id of the row behind the rule named name for
// plan ("" for every plan) in the policy in force, for an audit record's
// rule_id; false when the policy did not come from the table or has no
// such rule.
func (s *Source) RuleID(name, plan string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[ruleKey{name, plan}]
	return id, ok
}

// Close stops the reloading and the listener, closes the listener's
// connection and waits for its goroutines to return; the policy in force
// stays. It is idempotent and returns nil.
func (s *Source) Close() error {
	s.once.Do(func() {
		s.cancel()
		<-s.exited
	})
	return nil
}

// reloadLoop is the reloading goroutine: every load after the first
// happens on it, one at a time, so that older rows never replace newer
// ones.
func (s *Source) reloadLoop(ctx context.Context) {
	ticker := time.NewTicker(s.cfg.interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.load(ctx, false)
		case <-s.kick:
			s.load(ctx, false)
		case reply := <-s.reqs:
			reply <- s.load(ctx, false)
		}
	}
}

// reload asks the reloading goroutine for a load, unless one is pending.
func (s *Source) reload() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// listenLoop keeps a connection listening on Channel and asks for a
// reload on every notification and on every new connection (changes may
// have been missed while there was none). conn is the first connection,
// which NewSource made and reported listening; nil if it could not make one.
func (s *Source) listenLoop(ctx context.Context, conn *pgx.Conn) {
	defer func() {
		if conn != nil {
			s.closeConn(conn)
		}
		s.setListening(false)
	}()
	backoff := s.cfg.minBackoff
	for {
		if conn == nil {
			var err error
			if conn, err = s.connectListener(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.failed("listen", err)
				// Up to a fifth shorter at random, never longer.
				wait := backoff - time.Duration(rand.Int64N(int64(backoff)/5+1))
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				backoff = min(2*backoff, s.cfg.maxBackoff)
				continue
			}
			backoff = s.cfg.minBackoff
			s.mu.Lock()
			s.stats.Reconnects++
			s.mu.Unlock()
			s.setListening(true)
			s.recovered("listen", "pglimit: listening again for rule changes")
			s.reload()
		}
		// Wake up every interval to check the connection: a peer that
		// vanished without closing it (a network partition) would
		// otherwise leave us waiting forever.
		wctx, cancel := context.WithTimeout(ctx, s.cfg.interval)
		_, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			s.reload()
			continue
		case ctx.Err() != nil:
			return
		case wctx.Err() != nil:
			pctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
			err = conn.Ping(pctx)
			cancel()
			if err == nil {
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.closeConn(conn)
		conn = nil
		s.setListening(false)
		s.failed("listen", fmt.Errorf("pglimit: listening on %s: connection lost: %w", Channel, err))
	}
}

// connectListener opens the listener's connection and listens on
// Channel.
func (s *Source) connectListener(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, s.connCfg)
	if err != nil {
		return nil, fmt.Errorf("pglimit: listening on %s: %w", Channel, err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		s.closeConn(conn)
		return nil, fmt.Errorf("pglimit: listening on %s: %w", Channel, err)
	}
	return conn, nil
}

func (s *Source) closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

func (s *Source) setListening(up bool) {
	s.mu.Lock()
	s.stats.Listening = up
	s.mu.Unlock()
}

// load reads the rules and, if they differ from those in force, compiles
// them and puts their policy in force; it records and logs the outcome.
// first is NewSource's load.
func (s *Source) load(ctx context.Context, first bool) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	specs, ids, err := s.fetch(ctx)
	if err == nil && s.applied != nil && reflect.DeepEqual(specs, s.applied) {
		s.mu.Lock()
		s.stats.Unchanged++
		s.stats.LastSuccess = time.Now()
		s.mu.Unlock()
		s.recovered("load", "pglimit: rules load again")
		return nil
	}
	var p *core.Policy
	if err == nil {
		p, err = compile(specs, ids, s.cfg.plans)
	}
	if err == nil {
		byRule := make(map[ruleKey]int64, len(specs))
		compiled, _ := rules.CompileRules(specs) // compile succeeded: so does this
		for i, r := range compiled {
			byRule[ruleKey{r.Name, r.Plan}] = ids[i]
		}
		// The policy goes in force with the lock held, so that whoever
		// sees it and then asks Stats or RuleID gets the counts and the
		// rule ids that go with it, not the previous policy's.
		s.mu.Lock()
		if err = s.limiter.SetPolicy(p); err == nil {
			if !first {
				s.stats.Reloads++
			}
			s.stats.LastSuccess = time.Now()
			s.stats.Rules, s.stats.FromFile = len(p.Rules()), false
			s.ids = byRule
		}
		s.mu.Unlock()
		if err != nil {
			err = fmt.Errorf("pglimit: the limiter refused the rules of RateLimitRule: %w", err)
		}
	}
	if err != nil {
		if !first {
			s.failed("load", err)
		} else {
			s.mu.Lock()
			s.stats.Failures++
			s.stats.LastError, s.stats.LastFailure = err, time.Now()
			s.mu.Unlock()
		}
		return err
	}
	s.applied = specs
	if first {
		s.log.Info("pglimit: rules loaded", "rules", len(p.Rules()))
	} else {
		s.recovered("load", "pglimit: rules load again")
		s.log.Info("pglimit: rules reloaded", "rules", len(p.Rules()))
	}
	return nil
}

// failed records a failure of kind ("load" or "listen") and logs it,
// unless one of its kind was logged less than logEvery ago.
func (s *Source) failed(kind string, err error) {
	now := time.Now()
	s.mu.Lock()
	if kind == "load" {
		s.stats.Failures++
		s.stats.LastError, s.stats.LastFailure = err, now
	}
	last := s.lastLog[kind]
	logIt := last.IsZero() || now.Sub(last) >= logEvery
	suppressed := s.unlogged[kind]
	if logIt {
		s.lastLog[kind], s.unlogged[kind] = now, 0
	} else {
		s.unlogged[kind]++
	}
	s.mu.Unlock()
	if !logIt {
		return
	}
	if kind == "load" {
		s.log.Error("pglimit: loading the rules failed; the policy in force stays", "error", err, "suppressed", suppressed)
	} else {
		s.log.Warn("pglimit: not listening for rule changes; reloading every interval meanwhile", "error", err, "suppressed", suppressed)
	}
}

// recovered ends a run of failures of kind: it logs msg if one was logged,
// and lets the next failure be logged at once.
func (s *Source) recovered(kind, msg string) {
	s.mu.Lock()
	was := !s.lastLog[kind].IsZero()
	n := s.unlogged[kind]
	delete(s.lastLog, kind)
	delete(s.unlogged, kind)
	s.mu.Unlock()
	if was {
		s.log.Info(msg, "suppressed", n)
	}
}

// selectRules reads every column a Spec needs, in rule_id order: the
// policy's order.
const selectRules = `SELECT rule_id, key_pattern, scope, rate_per_second, burst_capacity, plan,
	is_active, description, name, algorithm, rate, period, window_length, max_wait, routes, shadow
FROM RateLimitRule ORDER BY rule_id`

// fetch reads the rows and turns them into specs, each checked alone;
// ids[i] is the rule_id of specs[i]. Every bad row is reported, joined.
func (s *Source) fetch(ctx context.Context) ([]rules.Spec, []int64, error) {
	rows, err := s.pool.Query(ctx, selectRules)
	if err != nil {
		return nil, nil, fmt.Errorf("pglimit: loading RateLimitRule: %w", err)
	}
	defer rows.Close()
	specs := []rules.Spec{}
	var ids []int64
	var bad []error
	for rows.Next() {
		var (
			r                       rules.Spec
			id                      int64
			plan, desc, name        *string
			active                  bool
			period, window, maxWait pgtype.Interval
		)
		if err := rows.Scan(&id, &r.KeyPattern, &r.Scope, &r.RatePerSecond, &r.BurstCapacity, &plan,
			&active, &desc, &name, &r.Algorithm, &r.Rate, &period, &window, &maxWait, &r.Routes, &r.Shadow); err != nil {
			return nil, nil, fmt.Errorf("pglimit: loading RateLimitRule: %w", err)
		}
		r.Plan, r.Description, r.Name = deref(plan), deref(desc), deref(name)
		r.IsActive = &active
		if len(r.Routes) == 0 {
			r.Routes = nil
		}
		var rowErr error
		for _, d := range []struct {
			column string
			from   pgtype.Interval
			to     *rules.Duration
		}{{"period", period, &r.Period}, {"window_length", window, &r.Window}, {"max_wait", maxWait, &r.MaxWait}} {
			if *d.to, err = duration(d.from); err != nil && rowErr == nil {
				rowErr = &RowError{RuleID: id, KeyPattern: r.KeyPattern, Plan: r.Plan, Column: d.column, Err: err}
			}
		}
		if rowErr == nil {
			rowErr = checkRow(id, r)
		}
		if rowErr != nil {
			bad = append(bad, rowErr)
			continue
		}
		specs = append(specs, r)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("pglimit: loading RateLimitRule: %w", err)
	}
	if len(bad) > 0 {
		return nil, nil, errors.Join(bad...)
	}
	return specs, ids, nil
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// duration converts an INTERVAL; NULL is 0, "not given". Months have no
// fixed length, so an interval with any is refused.
func duration(iv pgtype.Interval) (rules.Duration, error) {
	if !iv.Valid {
		return 0, nil
	}
	if iv.Months != 0 {
		return 0, &reason{rules.ErrInvalidSpec, "an interval of months has no fixed length; write days, hours, minutes or seconds"}
	}
	const maxMicros = math.MaxInt64 / int64(time.Microsecond)
	us := iv.Microseconds
	days := int64(iv.Days) * int64(24*time.Hour/time.Microsecond)
	if us > maxMicros-max(days, 0) || us < -maxMicros-min(days, 0) {
		return 0, &reason{rules.ErrInvalidSpec, "interval out of range"}
	}
	return rules.Duration(time.Duration(us+days) * time.Microsecond), nil
}

// reason is the cause of a RowError found here rather than by the rules
// package: its text alone, wrapping the sentinel.
type reason struct {
	sentinel error
	text     string
}

func (r *reason) Error() string { return r.text }
func (r *reason) Unwrap() error { return r.sentinel }

// checkRow checks one row alone, so that a bad one is named by its
// rule_id.
func checkRow(id int64, r rules.Spec) error {
	_, err := rules.CompileRules([]rules.Spec{r})
	if err == nil {
		return nil
	}
	re := &RowError{RuleID: id, KeyPattern: r.KeyPattern, Plan: r.Plan, Err: err}
	if e, ok := errors.AsType[*rules.Error](err); ok {
		re.Column, re.Err = column(e.Field), e.Err
	}
	return re
}

// column is the column of the rules package's field name.
func column(field string) string {
	if field == "window" {
		return "window_length"
	}
	return field
}

// compile makes the policy of rows that were each checked alone, naming
// the rows of a rule that clashes with another.
func compile(specs []rules.Spec, ids []int64, plans core.Plans) (*core.Policy, error) {
	p, err := rules.Compile(specs, rules.WithPlans(plans))
	if err == nil {
		return p, nil
	}
	e, ok := errors.AsType[*rules.Error](err)
	if !ok {
		return nil, fmt.Errorf("pglimit: RateLimitRule: %w", err)
	}
	if e.Field == "default_plan" {
		return nil, fmt.Errorf("pglimit: WithPlans: %w", e.Err)
	}
	// A rule clashing with another: name both by rule_id.
	i, ok := e.Index()
	if !ok || i >= len(specs) {
		return nil, fmt.Errorf("pglimit: RateLimitRule: %w", err)
	}
	cause := e.Err
	if d, ok := errors.AsType[*rules.DuplicateError](cause); ok && d.Other < len(ids) {
		cause = &reason{core.ErrDuplicateRule, d.Naming(fmt.Sprintf("rule_id %d", ids[d.Other]))}
	}
	return nil, &RowError{RuleID: ids[i], KeyPattern: specs[i].KeyPattern, Plan: specs[i].Plan, Column: column(e.Field), Err: cause}
}

// RowError reports a RateLimitRule row that cannot be a rule: which row,
// which column and why. Err wraps rules.ErrInvalidSpec or one of core's
// configuration errors (core.ErrInvalidBurst, core.ErrInvalidRate, ...),
// for errors.Is. The zero value names no row.
type RowError struct {
	RuleID     int64  // the row's rule_id
	KeyPattern string // its key_pattern
	Plan       string // its plan, "" for NULL
	Column     string // the column at fault; "" for the row as a whole
	Err        error  // the reason
}

// Error formats the error as
// `pglimit: RateLimitRule rule_id 7 (key_pattern "user:{user_id}", plan "free"): burst_capacity: must be >= 1, got 0`.
func (e *RowError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pglimit: RateLimitRule rule_id %d (key_pattern %q", e.RuleID, e.KeyPattern)
	if e.Plan != "" {
		fmt.Fprintf(&b, ", plan %q", e.Plan)
	}
	b.WriteString("): ")
	if e.Column != "" {
		b.WriteString(e.Column + ": ")
	}
	b.WriteString(rules.CauseText(e.Err))
	return b.String()
}

// Unwrap returns the reason.
func (e *RowError) Unwrap() error { return e.Err }
