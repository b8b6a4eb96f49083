package pglimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/bucketry/ratelimit/core"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of the audit sink's options.
const (
	// DefaultQueueSize is the number of rows the queue holds when
	// WithQueueSize is not given.
	DefaultQueueSize = 8192
	// DefaultBatchSize is the most rows written in one COPY when
	// WithBatchSize is not given.
	DefaultBatchSize = 1000
	// DefaultFlushInterval is the longest a queued row waits for its batch
	// to fill when WithFlushInterval is not given.
	DefaultFlushInterval = time.Second
	// DefaultRetryTimeout is how long a failing batch is retried when
	// WithRetryTimeout is not given.
	DefaultRetryTimeout = 30 * time.Second
	// DefaultMaxWriteRate is the most rows per second written when
	// WithMaxWriteRate is not given.
	DefaultMaxWriteRate = 10_000
)

// Column limits of RateLimitViolation, in characters.
const (
	bucketKeyLen = 256
	endpointLen  = 255
)

// violationTable is RateLimitViolation as PostgreSQL folds the unquoted name
// of the migration.
const violationTable = "ratelimitviolation"

// AuditOption configures an Audit; pass options to NewAudit.
type AuditOption interface{ apply(*auditConfig) }

type auditOptionFunc func(*auditConfig)

func (f auditOptionFunc) apply(c *auditConfig) { f(c) }

type auditConfig struct {
	queueSize     int
	batchSize     int
	flushInterval time.Duration
	retryTimeout  time.Duration
	maxRate       int // rows per second; 0: no bound
	sampling      int
	perBucket     time.Duration
	ruleID        func(rule, plan string) (int64, bool)
	logger        *slog.Logger
	errs          []error
}

func (c *auditConfig) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("%w: pglimit: "+format, append([]any{core.ErrInvalidOption}, args...)...))
}

// WithQueueSize bounds the rows waiting to be written (DefaultQueueSize,
// 8192, when not given); n must be >= 1. Observe drops a row, and counts it,
// when the queue is full. A row takes about 150 bytes while queued.
func WithQueueSize(n int) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if n < 1 {
			c.fail("WithQueueSize: size must be >= 1, got %d", n)
			return
		}
		c.queueSize = n
	})
}

// WithBatchSize sets the most rows written in one COPY (DefaultBatchSize,
// 1000, when not given); n must be >= 1. A batch is written as soon as it
// is full.
func WithBatchSize(n int) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if n < 1 {
			c.fail("WithBatchSize: size must be >= 1, got %d", n)
			return
		}
		c.batchSize = n
	})
}

// WithFlushInterval sets the longest a row waits for its batch to fill
// before the batch is written anyway (DefaultFlushInterval, 1s, when not
// given); d must be > 0.
func WithFlushInterval(d time.Duration) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if d <= 0 {
			c.fail("WithFlushInterval: interval must be > 0, got %v", d)
			return
		}
		c.flushInterval = d
	})
}

// WithRetryTimeout bounds how long a batch that fails to be written (the
// database is down or refuses the rows) is retried, with a backoff from
// 50ms doubling up to 5s, before it is dropped and its rows counted as
// failed (DefaultRetryTimeout, 30s, when not given). d must be >= 0; 0
// drops a batch at its first failure. Meanwhile rows queue, and Observe
// drops what does not fit.
//
// Each attempt ends within d too, so that a database that takes the
// connection and never answers holds the writer no longer. An attempt
// made when no time is left (the one that 0 allows, the halves of a batch
// refused for some of its rows, see Audit) has up to 5s.
func WithRetryTimeout(d time.Duration) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if d < 0 {
			c.fail("WithRetryTimeout: timeout must be >= 0, got %v", d)
			return
		}
		c.retryTimeout = d
	})
}

// WithMaxWriteRate bounds the rows written per second, on average over
// whole batches (DefaultMaxWriteRate, 10,000, when not given): after each
// batch the writer waits until the rate allows the rows it wrote. A deny
// flood then costs the database, and the machine, that many rows a
// second at most: the queue stays full meanwhile, and a full queue drops
// and counts (AuditStats.Dropped) a denied decision's rows for the cost of
// one check. n must be >= 0; 0 removes the bound. Close writes what is
// queued without waiting.
func WithMaxWriteRate(n int) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if n < 0 {
			c.fail("WithMaxWriteRate: rows per second must be >= 0, got %d", n)
			return
		}
		c.maxRate = n
	})
}

// WithSampling keeps one denying tier in n, chosen at random, and counts
// the others as thinned; n must be >= 1, and 1 (the default) keeps every
// one. Sampling comes before WithPerBucketInterval.
func WithSampling(n int) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if n < 1 {
			c.fail("WithSampling: n must be >= 1, got %d", n)
			return
		}
		c.sampling = n
	})
}

// WithPerBucketInterval writes at most one row per bucket (rule and
// identity) every d, folding the bucket's other denials within d into the
// thinned count; d is measured on the decisions' clock (Decision.At) at
// millisecond precision and must be >= 1ms. 0, the default, folds nothing.
//
// The buckets are remembered in a fixed table of 16384 slots, by a 64-bit
// hash: when more buckets deny within d than the table holds, a bucket can
// lose its slot and write a second row within d (never fewer rows than
// promised, except in the rare case, about one in a million per pair, that
// two buckets share a slot and a 20-bit tag). A row that the interval
// lets through but the full queue drops still starts the interval.
func WithPerBucketInterval(d time.Duration) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if d != 0 && d < time.Millisecond {
			c.fail("WithPerBucketInterval: interval must be 0 or >= 1ms, got %v", d)
			return
		}
		c.perBucket = d
	})
}

// WithRuleIDs gives rule_id: id returns the rule_id of the RateLimitRule
// row behind a rule, by the rule's name and plan ("" for every plan), and
// false when there is none (then rule_id is NULL). Source.RuleID is such a
// func: WithRuleIDs(src.RuleID). Without this option rule_id is always
// NULL, as for rules made in Go code or read from a file. id is called on
// the writer goroutine only, once per row; it must be quick, and safe to
// call concurrently with whatever changes its answers. A nil id is an
// error.
func WithRuleIDs(id func(rule, plan string) (int64, bool)) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if id == nil {
			c.fail("WithRuleIDs: func is nil")
			return
		}
		c.ruleID = id
	})
}

// WithAuditLogger logs write failures and dropped rows through logger, at
// most one record of each kind every core.LogInterval (see
// core.LogThrottle). The default, without this option, logs nothing; a
// nil logger is an error.
func WithAuditLogger(logger *slog.Logger) AuditOption {
	return auditOptionFunc(func(c *auditConfig) {
		if logger == nil {
			c.fail("WithAuditLogger: logger is nil")
			return
		}
		c.logger = logger
	})
}

// AuditStats counts what an Audit did with the denials it observed. Every
// count is a total since NewAudit, except QueueDepth. Of the denying tiers
// observed, each is Thinned, Dropped or Enqueued; of the Enqueued, each is
// Written, Failed, still queued (QueueDepth) or in the batch being written.
// Enqueued counts the rows the writer took plus those queued, so for an
// instant it may miss the row the writer is taking.
type AuditStats struct {
	Enqueued    int64 // rows accepted into the queue
	Written     int64 // rows the database stored
	Dropped     int64 // rows refused because the queue was full or the Audit closed
	Thinned     int64 // rows left out by WithSampling or WithPerBucketInterval
	Failed      int64 // rows lost with a batch that could not be written in WithRetryTimeout, or refused by the database
	WriteErrors int64 // failed attempts to write a batch, retried or not
	QueueDepth  int64 // rows queued now
}

// violation is one queued row. Its strings come from the observed Request
// and Rule: Go strings are immutable, so keeping them copies nothing.
type violation struct {
	rule      string
	plan      string // the rule's
	identity  string
	user      string
	ip        string
	endpoint  string
	at        int64 // Unix ns
	remaining int64
	shadow    bool
}

// Audit writes the seed's RateLimitViolation rows for denied requests: one
// row per denying tier, through a bounded queue that a single goroutine
// writes to PostgreSQL in batches with COPY. Give its Option to the
// limiter (or Observe to core.WithObserver). An Audit is safe for concurrent use; make one with
// NewAudit and stop it with Close.
//
// The auditColumns are filled as follows:
//
//   - bucket_key: the rule's name, ":" and the tier's identity (the
//     request's User, IP or Endpoint, "*" for a global rule, the
//     dimension's value for a custom one): "per-user:42". A key longer than
//     the column's 256 characters keeps its first 239 and ends with "#" and
//     16 hex digits of the SHA-256 of the whole key as given, so distinct keys
//     stay distinct.
//   - user_id, ip_address, endpoint: the request's User, IP and Endpoint,
//     NULL when empty; an IP that is neither an address nor a prefix (as
//     keyfuncs' IPv6 grouping makes) is NULL; an endpoint is cut to 255
//     characters.
//   - requested_at: the decision's time (Decision.At, the store's clock).
//   - tokens_at_time: the denying tier's Remaining.
//   - rule_id: from WithRuleIDs, else NULL.
//
// PostgreSQL refuses text that is not UTF-8, or that holds NUL, and
// core.CheckKey lets bytes that are not UTF-8 through: in bucket_key,
// user_id and endpoint each run of such bytes, and each NUL, is written as
// U+FFFD, the replacement character, before the text is measured and cut.
//
// A tier in shadow mode that would have denied (see core.WithShadow) is
// written like the others, with shadow set to true, when the table has a
// BOOLEAN column named shadow (Migrate adds it); in a table without one
// (made from the seed's definition), such rows are counted as
// thinned and not written, so that a shadow denial never reads as a real
// one. Store failures (Decision.Degraded with no tier) write nothing: they
// are no violation.
//
// Writes are at least once: a batch whose COPY committed but whose answer
// was lost is written again. A batch that the database refuses for the
// data of some rows (an error of SQLSTATE class 22, bad data, or 23, a
// constraint they break, a CHECK of your own say) is split in halves, each
// written alone, down to the single rows it refuses: those are logged and
// counted as failed, and the batch's other rows are written.
type Audit struct {
	pool *pgxpool.Pool
	cfg  auditConfig
	log  *core.LogThrottle

	queue  chan violation
	closed atomic.Bool
	// The writer sleeps until rows need it: armed is set while queued rows
	// have the writer's attention (a flush timer or a wake on its way);
	// a request that queues a row when it is clear, or fills a batch, wakes
	// the writer. Others queue their row and go: a flood costs a request
	// no wake-up of the writer.
	armed atomic.Bool
	wake  chan struct{}

	seed  maphash.Seed
	slots []atomic.Uint64 // WithPerBucketInterval's table

	received    atomic.Int64 // rows the writer took off the queue
	written     atomic.Int64
	gate        *core.DenialGate // shut while the queue is full; counts the drops
	thinned     atomic.Int64
	failed      atomic.Int64
	writeErrors atomic.Int64

	stop      chan struct{}
	done      chan struct{}
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// NewAudit returns an Audit writing to pool's database, where the
// RateLimitViolation table must exist (the migrations create it), and
// starts its writer goroutine; it does not connect. It fails with an error
// wrapping core.ErrInvalidOption for a nil pool, a nil option or an option's bad
// value.
func NewAudit(pool *pgxpool.Pool, opts ...AuditOption) (*Audit, error) {
	c := auditConfig{
		queueSize:     DefaultQueueSize,
		batchSize:     DefaultBatchSize,
		flushInterval: DefaultFlushInterval,
		retryTimeout:  DefaultRetryTimeout,
		maxRate:       DefaultMaxWriteRate,
		sampling:      1,
	}
	if pool == nil {
		c.fail("NewAudit: pool is nil")
	}
	for i, o := range opts {
		if o == nil {
			c.fail("NewAudit: option %d is nil", i)
			continue
		}
		o.apply(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Audit{
		pool:   pool,
		cfg:    c,
		log:    core.NewLogThrottle(c.logger, core.LogInterval),
		queue:  make(chan violation, c.queueSize),
		gate:   core.NewDenialGate(),
		wake:   make(chan struct{}, 1),
		seed:   maphash.MakeSeed(),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		cancel: cancel,
	}
	if c.perBucket > 0 {
		a.slots = make([]atomic.Uint64, slotCount)
	}
	go a.run(ctx)
	return a, nil
}

// Option is the limiter option that records the denying tiers of its
// decisions (core.WithGatedDenials):
//
//	limiter, err := core.NewLimiter(policy, audit.Option())
//
// It is the cheapest way to feed the Audit: the limiter hands each denial
// over as a value, with no copy of the decision, and a decision no tier
// denies costs nothing. While the queue is full (a deny flood) or the Audit
// closed, the Audit keeps its core.DenialGate shut: a denied decision's
// rows are counted as dropped before the limiter makes them, for the cost
// of one load and one addition; otherwise each row is thinned (sampling,
// WithPerBucketInterval), enqueued or, if the queue filled meanwhile,
// dropped and counted. Nothing blocks or allocates. A limiter takes one
// Audit this way; Observe records from an Observer.
func (a *Audit) Option() core.Option { return core.WithGatedDenials(a.gate, a.deny) }

// full shuts the gate: the queue was full when a row did not fit or after
// one did. Checked again after: if the writer took rows meanwhile, before
// the gate was shut, it opened it before, and the gate is opened again
// here, so that it never stays shut over room in the queue.
func (a *Audit) full() {
	a.gate.Shut()
	if !a.closed.Load() && len(a.queue) < cap(a.queue) {
		a.gate.Open()
	}
}

func (a *Audit) deny(_ context.Context, v core.Denial) {
	a.offer(v.Rule, v.Identity, v.User, v.IP, v.Endpoint, v.At.UnixNano(), v.Remaining, v.Shadow)
}

// Observe records e's denying tiers, as Option does, from an Observer:
// pass it to core.WithObserver. An observer's event is a copy the limiter
// makes, which costs every decision more than Option. Observe never blocks
// and allocates nothing. Decisions that allowed the request without a
// shadow denial return at once.
func (a *Audit) Observe(ctx context.Context, e *core.Event) {
	d := e.Decision
	if d == nil || d.Allowed && !d.ShadowDenied {
		return
	}
	at := d.At.UnixNano()
	if d.At.IsZero() {
		at = time.Now().UnixNano()
	}
	for i := range d.NumTiers() {
		t := d.TierAt(i)
		if t.Allowed || t.Rule == nil {
			continue
		}
		var id, user, ip, endpoint string
		if req := e.Request; req != nil {
			id, user, ip, endpoint = req.Identity(t.Rule.Scope), req.User, req.IP, req.Endpoint
		}
		a.offer(t.Rule, id, user, ip, endpoint, at, t.Remaining, t.Shadow)
	}
}

func (a *Audit) offer(rule *core.Rule, id, user, ip, endpoint string, at, remaining int64, shadow bool) {
	if a.cfg.sampling > 1 && rand.Uint32()%uint32(a.cfg.sampling) != 0 {
		a.thinned.Add(1)
		return
	}
	if a.slots != nil && !a.admit(rule.Name, id, at) {
		a.thinned.Add(1)
		return
	}
	// len of a channel takes no lock: a full queue, the common case in a
	// flood, costs one load.
	if a.closed.Load() || len(a.queue) == cap(a.queue) {
		a.gate.Drop(1)
		a.full()
		return
	}
	v := violation{rule: rule.Name, plan: rule.Plan, identity: id, user: user, ip: ip, endpoint: endpoint, at: at, remaining: remaining, shadow: shadow}
	select {
	case a.queue <- v:
	default:
		a.gate.Drop(1)
		a.full()
		return
	}
	if len(a.queue) == cap(a.queue) {
		a.full()
	}
	if (!a.armed.Load() && a.armed.CompareAndSwap(false, true)) || len(a.queue) >= a.cfg.batchSize {
		select {
		case a.wake <- struct{}{}:
		default: // a wake is on its way already
		}
	}
}

// WithPerBucketInterval's table: each slot packs a tag (the hash's top
// tagBits) and the Unix millisecond before which the slot's bucket writes
// no row (44 bits last until the year 2527).
const (
	slotCount = 1 << 14
	tagBits   = 20
	timeBits  = 64 - tagBits
	timeMask  = 1<<timeBits - 1
)

// admit reports whether the bucket of rule and identity may write a row at
// at (Unix ns), and if so starts its interval. Concurrent callers for one
// bucket race on one compare-and-swap: one wins, the others see its
// deadline.
func (a *Audit) admit(rule, identity string, at int64) bool {
	h := maphash.String(a.seed, identity) ^ bits.RotateLeft64(maphash.String(a.seed, rule), 31)
	slot := &a.slots[h&(slotCount-1)]
	tag := h >> timeBits
	now := uint64(max(at, 0)/int64(time.Millisecond)) & timeMask
	next := (now + uint64(a.cfg.perBucket/time.Millisecond)) & timeMask
	for {
		v := slot.Load()
		if v>>timeBits == tag && now < v&timeMask {
			return false
		}
		if slot.CompareAndSwap(v, tag<<timeBits|next) {
			return true
		}
	}
}

// Stats returns the counts so far. It is safe to call concurrently with
// everything else, also after Close.
func (a *Audit) Stats() AuditStats {
	depth := int64(len(a.queue))
	return AuditStats{
		Enqueued:    a.received.Load() + depth,
		Written:     a.written.Load(),
		Dropped:     a.gate.Dropped(),
		Thinned:     a.thinned.Load(),
		Failed:      a.failed.Load(),
		WriteErrors: a.writeErrors.Load(),
		QueueDepth:  depth,
	}
}

// CollectMetrics implements core.MetricSource: the counters
// audit_rows_enqueued_total, audit_rows_written_total,
// audit_rows_dropped_total, audit_rows_thinned_total,
// audit_rows_failed_total and audit_write_errors_total, and the gauge
// audit_queue_depth (see AuditStats).
func (a *Audit) CollectMetrics(emit func(core.Metric)) {
	s := a.Stats()
	emit(core.Metric{Name: "audit_rows_enqueued_total", Help: "Violation rows accepted into the audit queue.", Kind: core.Counter, Value: float64(s.Enqueued)})
	emit(core.Metric{Name: "audit_rows_written_total", Help: "Violation rows written to PostgreSQL.", Kind: core.Counter, Value: float64(s.Written)})
	emit(core.Metric{Name: "audit_rows_dropped_total", Help: "Violation rows dropped because the audit queue was full or closed.", Kind: core.Counter, Value: float64(s.Dropped)})
	emit(core.Metric{Name: "audit_rows_thinned_total", Help: "Violation rows left out by sampling or the per-bucket interval.", Kind: core.Counter, Value: float64(s.Thinned)})
	emit(core.Metric{Name: "audit_rows_failed_total", Help: "Violation rows lost with batches that could not be written.", Kind: core.Counter, Value: float64(s.Failed)})
	emit(core.Metric{Name: "audit_write_errors_total", Help: "Failed attempts to write a batch of violation rows.", Kind: core.Counter, Value: float64(s.WriteErrors)})
	emit(core.Metric{Name: "audit_queue_depth", Help: "Violation rows waiting in the audit queue.", Kind: core.Gauge, Value: float64(s.QueueDepth)})
}

// Close stops accepting rows, writes what is queued and stops the writer
// goroutine. If ctx ends first, the write in progress is abandoned and
// its batch and the rows still queued are counted as failed; the
// goroutine is stopped all the same, and Close returns ctx's error. Rows
// that Observe offers during or after Close are dropped. Close may be
// called more than once and concurrently; each call waits for the writer
// to stop.
func (a *Audit) Close(ctx context.Context) error {
	a.closeOnce.Do(func() {
		a.closed.Store(true)
		a.gate.Shut()
		close(a.stop)
	})
	select {
	case <-a.done:
		return nil
	case <-ctx.Done():
		a.cancel()
		<-a.done
		return fmt.Errorf("pglimit: audit close: %w", ctx.Err())
	}
}

// run is the writer goroutine.
func (a *Audit) run(ctx context.Context) {
	defer close(a.done)
	defer a.cancel()
	w := auditWriter{a: a, batch: make([]violation, 0, min(a.cfg.batchSize, 1024))}
	timer := time.NewTimer(a.cfg.flushInterval)
	timer.Stop()
	timed := false // the timer runs for rows held or queued
	// settle makes sure that rows held or queued get written within the
	// flush interval: it starts the timer, or clears armed when there are
	// none (then checks again, for a row queued meanwhile).
	settle := func() {
		if timed {
			return
		}
		if len(w.batch) == 0 && len(a.queue) == 0 {
			a.armed.Store(false)
			if len(a.queue) == 0 {
				return
			}
			a.armed.Store(true)
		}
		timer.Reset(a.cfg.flushInterval)
		timed = true
	}
	for {
		select {
		case <-a.wake:
			w.fill(ctx, false)
			settle()
		case <-timer.C:
			timed = false
			w.fill(ctx, true)
			settle()
		case <-a.stop:
			timer.Stop()
			w.drain(ctx)
			return
		}
		w.reportDrops(ctx)
	}
}

// fill takes the rows queued now into batches and writes every full one;
// with all, what is left too.
func (w *auditWriter) fill(ctx context.Context, all bool) {
	for n := len(w.a.queue); n > 0; n-- {
		w.batch = append(w.batch, <-w.a.queue)
		w.a.received.Add(1)
		if !w.a.closed.Load() {
			w.a.gate.Open() // room for a row again
		}
		if len(w.batch) >= w.a.cfg.batchSize {
			w.pace(w.flush(ctx))
		}
	}
	if all {
		w.pace(w.flush(ctx))
	}
}

// pace waits, after a batch of n rows, until WithMaxWriteRate allows them:
// the rows' share of a second past the later of the last such time and
// now. It returns at once when the Audit is being closed.
func (w *auditWriter) pace(n int) {
	rate := w.a.cfg.maxRate
	if rate == 0 || n == 0 {
		return
	}
	now := time.Now()
	if w.paced.Before(now) {
		w.paced = now
	}
	w.paced = w.paced.Add(time.Duration(n) * time.Second / time.Duration(rate))
	wait := w.paced.Sub(now)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.a.stop:
	}
}

// auditWriter is the state of the writer goroutine, which alone touches it.
type auditWriter struct {
	a     *Audit
	batch []violation
	row   [8]any

	// shadowColumn: RateLimitViolation has a column shadow, known once
	// checked; checked again after a failed write, as the table may have
	// been migrated meanwhile.
	checked, shadowColumn bool
	droppedSeen           int64
	paced                 time.Time // see pace
	noRuleID              bool      // write rule_id NULL: the mapping named a missing rule
}

// drain writes everything queued when Close is called; once ctx has
// ended, it counts what is left as failed.
func (w *auditWriter) drain(ctx context.Context) {
	for {
		select {
		case v := <-w.a.queue:
			w.a.received.Add(1)
			if ctx.Err() != nil {
				w.a.failed.Add(1)
				continue
			}
			w.batch = append(w.batch, v)
			if len(w.batch) >= w.a.cfg.batchSize {
				w.flush(ctx)
			}
		default:
			w.flush(ctx)
			w.reportDrops(ctx)
			return
		}
	}
}

// reportDrops logs rows dropped since it last did, throttled.
func (w *auditWriter) reportDrops(ctx context.Context) {
	if w.a.log == nil {
		return
	}
	n := w.a.gate.Dropped()
	if n == w.droppedSeen {
		return
	}
	if w.a.log.Log(ctx, slog.LevelWarn, "audit:dropped", "pglimit: audit queue full, violation rows dropped",
		slog.Int64("dropped_total", n), slog.Int("queue_size", w.a.cfg.queueSize)) {
		w.droppedSeen = n
	}
}

// Backoff between attempts to write a batch.
const (
	auditMinBackoff = 50 * time.Millisecond
	auditMaxBackoff = 5 * time.Second
)

// auditLateAttempt bounds an attempt that must be made after the batch's
// retry deadline: see try.
const auditLateAttempt = 5 * time.Second

// flush writes the batch, retrying with backoff within WithRetryTimeout,
// empties it and returns the number of rows it held (for pace).
func (w *auditWriter) flush(ctx context.Context) (rows int) {
	if len(w.batch) == 0 {
		return 0
	}
	rows = len(w.batch)
	defer func() {
		clear(w.batch) // let the strings go
		w.batch = w.batch[:0]
	}()
	w.save(ctx, w.batch, time.Now().Add(w.a.cfg.retryTimeout))
	return
}

// save writes rows, retrying with backoff until deadline, and counts as
// failed those it could not write. Rows the database refuses for their
// data are split in halves, each saved alone, down to the single rows it
// refuses: one bad row costs no other its place in the log.
func (w *auditWriter) save(ctx context.Context, rows []violation, deadline time.Time) {
	backoff := auditMinBackoff
	for attempt := 1; ; attempt++ {
		var err error
		if rows, err = w.try(ctx, rows, deadline, attempt == 1); err == nil {
			return
		}
		w.a.writeErrors.Add(1)
		w.checked = false
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23503" && !w.noRuleID && w.a.cfg.ruleID != nil {
			// foreign_key_violation: WithRuleIDs named a rule deleted
			// since; the rows are worth more than their rule_id.
			w.noRuleID = true
			rows, err = w.try(ctx, rows, deadline, true)
			w.noRuleID = false
			if err == nil {
				return
			}
			w.a.writeErrors.Add(1)
		}
		wait := min(backoff, time.Until(deadline))
		permanent := permanentWriteError(err)
		split := permanent && len(rows) > 1 && ctx.Err() == nil
		lost := !split && (permanent || ctx.Err() != nil || wait <= 0)
		w.a.log.Log(ctx, slog.LevelWarn, "audit:write", "pglimit: writing violation rows failed",
			slog.Int("rows", len(rows)), slog.Int("attempt", attempt), slog.Bool("dropped", lost),
			slog.String("error", err.Error()))
		if split {
			half := len(rows) / 2
			w.save(ctx, rows[:half], deadline)
			w.save(ctx, rows[half:], deadline)
			return
		}
		if lost {
			w.a.failed.Add(int64(len(rows)))
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, auditMaxBackoff)
	}
}

// try writes rows once, by deadline: a database that never answers
// holds them no longer than a failing one. An attempt that must be made
// (the first of a batch or a half, the one without rule_id) but has no
// time left gets auditLateAttempt: WithRetryTimeout(0) allows one attempt,
// and the halves of a refused batch are not retries of it.
func (w *auditWriter) try(ctx context.Context, rows []violation, deadline time.Time, must bool) ([]violation, error) {
	if now := time.Now(); must && !now.Before(deadline) {
		deadline = now.Add(auditLateAttempt)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	return w.write(ctx, rows)
}

// permanentWriteError reports whether err is one that writing the same rows again
// cannot cure: bad data (class 22) or a constraint the rows break (23).
func permanentWriteError(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23"))
}

var (
	auditColumns       = []string{"bucket_key", "user_id", "ip_address", "endpoint", "requested_at", "tokens_at_time", "rule_id"}
	auditShadowColumns = append(auditColumns[:len(auditColumns):len(auditColumns)], "shadow")
)

// write copies rows into the table in one COPY, which stores every row or
// none, and returns rows without those it leaves out.
func (w *auditWriter) write(ctx context.Context, rows []violation) ([]violation, error) {
	if !w.checked {
		var ok bool
		err := w.a.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'shadow' AND data_type = 'boolean')`,
			violationTable).Scan(&ok)
		if err != nil {
			return rows, fmt.Errorf("pglimit: audit: reading the auditColumns of %s: %w", violationTable, err)
		}
		w.checked, w.shadowColumn = true, ok
	}
	cols := auditColumns
	if w.shadowColumn {
		cols = auditShadowColumns
	} else {
		// Without a column to mark them, shadow rows would read as
		// real denials.
		kept := rows[:0]
		for _, v := range rows {
			if v.shadow {
				w.a.thinned.Add(1)
				continue
			}
			kept = append(kept, v)
		}
		clear(rows[len(kept):])
		rows = kept
		if len(rows) == 0 {
			return rows, nil
		}
	}
	n, err := w.a.pool.CopyFrom(ctx, pgx.Identifier{violationTable}, cols,
		pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) { return w.values(&rows[i], len(cols)), nil }))
	if err != nil {
		return rows, fmt.Errorf("pglimit: audit: writing %d rows to %s: %w", len(rows), violationTable, err)
	}
	w.a.written.Add(n)
	return rows, nil
}

// values returns v's column values in w.row, which CopyFrom encodes before
// it asks for the next row.
func (w *auditWriter) values(v *violation, n int) []any {
	r := &w.row
	r[0] = bucketKey(v.rule, v.identity)
	r[1] = nullText(v.user, 0)
	r[2] = nil
	if ip, ok := parseIP(v.ip); ok {
		r[2] = ip
	}
	r[3] = nullText(v.endpoint, endpointLen)
	r[4] = time.Unix(0, v.at).UTC()
	r[5] = float64(v.remaining)
	r[6] = nil
	if w.a.cfg.ruleID != nil && !w.noRuleID {
		if id, ok := w.a.cfg.ruleID(v.rule, v.plan); ok {
			r[6] = id
		}
	}
	r[7] = v.shadow
	return r[:n]
}

// bucketKey is rule ":" identity as text PostgreSQL takes (validText),
// shortened to the column's length as the Audit's documentation says. The
// hash is of the key as given, so that keys that differ only in the bytes
// validText replaces stay distinct when shortened.
func bucketKey(rule, identity string) string {
	given := rule + ":" + identity
	key := validText(given)
	if utf8.RuneCountInString(key) <= bucketKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(given))
	const suffix = 1 + 16
	return truncateChars(key, bucketKeyLen-suffix) + "#" + hex.EncodeToString(sum[:8])
}

// nullText is s as text PostgreSQL takes (validText), cut to limit
// characters (no limit when 0), or nil (NULL) for "".
func nullText(s string, limit int) any {
	if s == "" {
		return nil
	}
	s = validText(s)
	if limit > 0 {
		return truncateChars(s, limit)
	}
	return s
}

// truncateChars returns s's first n characters, or s when it has no more.
func truncateChars(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}

// validText returns s with each run of bytes that is not UTF-8, and each
// NUL, replaced by U+FFFD, the replacement character, which shows where:
// PostgreSQL refuses either in a text column, and with it the whole COPY.
func validText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// parseIP reads an address or a prefix for an INET column.
func parseIP(s string) (netip.Prefix, bool) {
	if s == "" {
		return netip.Prefix{}, false
	}
	if addr, err := netip.ParseAddr(s); err == nil {
		addr = addr.WithZone("")
		return netip.PrefixFrom(addr, addr.BitLen()), true
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, true
	}
	return netip.Prefix{}, false
}
