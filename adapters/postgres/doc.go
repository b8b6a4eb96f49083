// Package pglimit keeps a limiter's rules in PostgreSQL and writes its
// violations there.
//
// # Schema
//
// [Migrate] (or [MigrationSQL], for a migration tool of your own) creates
// the seed's two tables, extended:
//
//   - RateLimitRule, one row per rule: the seed's columns (rule_id,
//     key_pattern, scope, rate_per_second, burst_capacity, plan, is_active,
//     description, created_at, UNIQUE (key_pattern, plan)) and name,
//     algorithm (token_bucket by default, shaping, fixed_window,
//     sliding_window, sliding_log), rate and period (INTERVAL) as another way
//     to give the rate, window_length and max_wait (INTERVAL), routes
//     (TEXT[]) and shadow. rate_per_second may be NULL, for window
//     algorithms and rates given per period. Two rows for every plan (plan
//     NULL) cannot share a key pattern either. A trigger notifies [Channel]
//     on every INSERT, UPDATE, DELETE and TRUNCATE.
//   - RateLimitViolation, the audit log. Its user_id is TEXT, where the
//     seed has BIGINT: user identities are strings (the limiter's
//     Request.User), and a numeric id reads back as its digits. Its rule_id
//     is set to NULL when the rule's row is deleted, so history outlives
//     rules.
//
// Tables created from the seed's own definition are upgraded in place:
// the new columns are added and user_id becomes TEXT, keeping the ids.
//
// A row means what the same fields mean in a rules file (see package
// rules): NULL is "not given", an INTERVAL is a duration (one with months
// is refused: a month has no fixed length). The table holds no policy-level
// setting: say with [WithPlans] what requests of no plan or of an unknown
// plan get.
//
// # Rules from the table
//
// [NewSource] loads the rows, puts their policy in force on a
// core.Limiter and keeps it current: at once when the trigger announces a
// change (on a connection of its own, reconnected with backoff when lost),
// and every interval in any case. The limiter never waits for the
// database: requests are decided with the policy in force, in memory. A
// bad row, rows that clash, a database that is down, or a policy the
// limiter refuses never replace the policy in force: the failure is
// counted ([Source.Stats]), reported as a [RowError] naming the rule_id and
// the column where a row is at fault, and logged without flooding.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	...
//	if err := pglimit.Migrate(ctx, pool); err != nil { ... }
//	limiter, err := core.NewLimiter(emptyPolicy)
//	...
//	src, err := pglimit.NewSource(ctx, pool, limiter,
//		pglimit.WithPlans(core.Plans{Default: "free"}),
//		pglimit.WithFallbackFile("/etc/ratelimit/rules.yaml"),
//		pglimit.WithLogger(slog.Default()))
//	...
//	defer src.Close()
//
// Changing a rule is an SQL statement; every instance has it within
// milliseconds:
//
//	UPDATE RateLimitRule SET rate_per_second = 20, burst_capacity = 100
//	WHERE key_pattern = 'user:{user_id}' AND plan = 'free';
//
// Rules keep their buckets across changes as long as their name does: a
// row's name is its name column, or else derived from key_pattern and plan
// ("user:{user_id}" for plan "free" is "user.free"). [Source.RuleID] maps a
// rule back to its row, for the audit log's rule_id.
package pglimit
