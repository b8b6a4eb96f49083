// Package rules reads a policy's rules from YAML or JSON files and keeps a
// limiter's policy in step with them.
//
//	policy, err := rules.Load("limits.yaml")
//	...
//	limiter, err := core.NewLimiter(policy, core.WithStore(store))
//	...
//	w, err := rules.Watch("limits.yaml", limiter, rules.WithLogger(slog.Default()))
//	...
//	defer w.Close()
//
// # The schema
//
// One schema serves files and database rows: a Spec is one rule, and its
// fields mirror the seed's RateLimitRule table. A file adds the
// policy-level settings at its top level:
//
//	default_plan: free          # core.Plans.Default
//	reject_unknown_plan: false  # core.Plans.RejectUnknown
//	rules:
//	  - key_pattern: "user:{user_id}"
//	    rate_per_second: 10
//	    burst_capacity: 50
//	    plan: free
//	  - key_pattern: "user:{user_id}"
//	    rate_per_second: 100
//	    burst_capacity: 500
//	    plan: pro
//	  - key_pattern: "endpoint:/api/search"
//	    rate_per_second: 1000
//	    burst_capacity: 2000
//	  - name: uploads
//	    scope: user
//	    algorithm: fixed_window
//	    burst_capacity: 100
//	    window: 24h
//	    routes: ["POST /upload"]
//
// The fields of a rule:
//
//	field            type      meaning
//	name             string    core rule name, 1-64 of [A-Za-z0-9_.-]; optional with key_pattern
//	key_pattern      string    seed form: "user:{user_id}", "ip:{ip}", "endpoint:/api/search", "global", "dim:{tenant}"
//	scope            string    user, ip, endpoint, global or dim:NAME; optional with key_pattern
//	algorithm        string    token_bucket (default), shaping, fixed_window, sliding_window, sliding_log
//	rate_per_second  number    token_bucket, shaping: tokens per second, converted exactly
//	rate, period     int, dur  token_bucket, shaping: rate tokens every period ("1m"); instead of rate_per_second
//	burst_capacity   int       bucket capacity, or the count allowed per window; >= 1
//	window           duration  fixed_window, sliding_window, sliding_log: the window, in whole ms
//	max_wait         duration  shaping only: the longest delay
//	plan             string    the plan the rule is for; empty or null: every plan
//	routes           [string]  route selectors (core.ParseRoute): "GET /search", "/search", "POST"
//	is_active        bool      default true; false keeps the rule out (core.Rule.Disabled)
//	shadow           bool      decided and reported, never denying (core.Rule.Shadow)
//	description      string    for people; not compiled
//
// Durations are Go duration strings ("500ms", "1m", "24h"); a bare number
// is an error, for its unit would be a guess. A number with a leading zero
// (010) is an error too: YAML reads it as octal, 8, where a person reads
// ten. Write 10, or 0o10 for an octal; 0x and 0b are read as hexadecimal and
// binary. null is the same as leaving a
// field out. Unknown fields, fields given twice and values of the wrong
// type are errors: a typo must not silently drop a setting. So is a field
// the rule's algorithm does not use (a window on a token bucket, a rate on
// a fixed window, a max_wait on anything but shaping), and so is a second
// YAML document after "---": a file is one document (a "---" with nothing
// after it, ending the file, is none).
//
// # Key patterns, scopes and routes
//
// key_pattern gives the scope, and for a route the rule's route:
//
//	key_pattern             scope         routes
//	global                  global        every route
//	user:{user_id}          user          every route
//	ip:{ip}                 ip            every route
//	endpoint:{endpoint}     endpoint      every route, one bucket per endpoint
//	endpoint:/api/search    endpoint      "/api/search" only (any route selector: "endpoint:GET /api/search")
//	dim:{tenant}            dim:tenant    every route
//
// The placeholder's name in braces is free for user, ip and endpoint
// ("user:{id}" is the same rule); for dim it names the dimension. When both
// key_pattern and scope are given they must agree. A rule whose
// key_pattern names a route cannot also have routes. Composite patterns
// ("user:{id}:endpoint:/x") are errors: a rule counts against one scope.
//
// # Names
//
// A rule with a key_pattern and no name gets one derived from the pattern
// and the plan: the kind ("global", "user", "ip", "endpoint", "dim"), then
// the dimension or the route with every run of characters other than
// letters, digits, '_' and '-' written '.', then the plan:
//
//	user:{user_id}, plan free        user.free
//	user:{user_id}, plan pro         user.pro
//	endpoint:/api/search             endpoint.api.search
//	endpoint:GET /items/{id}         endpoint.GET.items.id
//	dim:{tenant}, plan pro           dim.tenant.pro
//	global                           global
//
// A derived name longer than 64 characters keeps its first 55 and ends in
// '-' and 8 hex digits of a hash of the pattern and plan. Two rules whose
// names collide on overlapping plans (the seed's UNIQUE (key_pattern,
// plan) excludes it for derived names, but "endpoint:/a/b" and
// "endpoint:/a.b" both give "endpoint.a.b") are refused with an error
// wrapping core.ErrDuplicateRule; give one of them a name. A rule's name is
// its buckets' name: renaming a rule starts its buckets afresh.
//
// # Rates
//
// A rate is rate_per_second, as the seed writes it, or rate and period;
// exactly one of the two. rate_per_second is converted exactly, never
// rounded: it is read as the decimal the file wrote (for a float64 from a
// database, the shortest decimal that converts back to it), reduced to a
// fraction N/D, and becomes N tokens every D seconds: 0.5 is 1 every 2s,
// 2.5 is 5 every 2s, 0.1 is 1 every 10s, 1000 is 1000 every second. A
// decimal that no whole number of tokens per whole number of nanoseconds
// equals, or that has more digits than a float64 holds, is an error naming
// rate_per_second: write the rate as rate and period instead ("rate: 1,
// period: 3s" for a third per second).
//
// # Errors
//
// Every error from Parse, Load, Compile and CompileRules is an *Error that
// names the file and line (for files), the rule (its name, or #i by its
// position from 0) and the field, and wraps ErrInvalidSpec or one of core's
// sentinels (core.ErrInvalidRate, core.ErrInvalidBurst,
// core.ErrInvalidWindow, core.ErrUnknownScope, core.ErrDuplicateRule,
// core.ErrInvalidPlan, core.ErrInvalidRule):
//
//	rules: limits.yaml:12: rule "search": burst_capacity: must be >= 1, got 0
//	rules: limits.yaml:20: rule #3: scope: "ip" disagrees with key_pattern "user:{user_id}", which is scope "user"
//
// [Error.Index] gives the rule's position. The cause of a name that two
// rules share is a [*DuplicateError], which gives the other rule's.
//
// # Reloading
//
// Watch loads a file, puts its policy in force on a core.Limiter and reloads
// it when the file changes or when asked (Watcher.Reload). A bad new file,
// or a policy the limiter refuses, never replaces the policy in force; the
// failure is logged and counted (Watcher.Stats).
package rules
