// Package benchmarks compares this project's limiter with peer libraries:
// speed (go test -bench) and correctness under concurrency (TestAdmission*).
// It is a module of its own, so that no peer library ever enters the
// requirements of a library module. It runs in the workspace, so that our
// modules are those of the working tree (make bench and make bench-report
// run these from the repository root):
//
//	cd benchmarks && go test -run '^$' -bench . -benchmem -timeout 0 .
//	cd benchmarks && go test -run '^TestAdmission' -v .
//	cd benchmarks && go run ./cmd/report results/bench.txt
//
// cmd/report prints, per scenario, our fastest implementation against the
// fastest peer, and checks the targets of issue 12 (see its targets.go):
// each gets a verdict, met or the measured ratio and how far it is from
// the one asked.
//
// # Names
//
// Every benchmark is named Benchmark<Group>/<Scenario>[/g=<goroutines>]/impl=<name>,
// one sub-benchmark per implementation of the same scenario, so that
// cmd/report (and benchstat -col /impl) can pair ours with the peers. Impl
// names starting with "ours" are this project, names starting with
// "ceiling_" are reference points and never peers: on Redis they decide
// nothing (a bare PING, or our script sent alone, one EVALSHA per
// decision); in memory, where a scenario has one subject, ceiling_clock
// reads the clock and decides nothing, ceiling_gcra is the least an exact
// decision costs, and ceiling_store the least one costs that is found
// among many buckets and reported to the caller (see ceiling_test.go);
// in BenchmarkMiddleware, ceiling_gin, ceiling_fiber and ceiling_nethttp
// are the least our limiter costs as middleware (see middlewareCeiling
// and fiberCeiling). "bare" is a route with no limiter
// (BenchmarkMiddleware), and every other name is a peer library.
//
// # Scenarios
//
// Memory (BenchmarkMemory), at g=1 (a plain loop) and g=2: a hot key
// allowed and denied, 100k scattered keys (g=2), three tiers, eight tiers
// (g=1; per-ip and four custom dimensions beside per-user, per-endpoint and
// global, for the allocation target), and 1M keys (g=2), which also
// reports B/key: the heap in use after a collection once the million
// buckets exist, less that before the implementation was built, per key.
//
// Redis (BenchmarkRedis), at 1, 16 and 64 goroutines on one local
// redis-server: a hot key, a deny flood, 10k keys, three tiers; and
// ThreeTierCluster, at 1 and 64 goroutines on a local Cluster of 3 masters,
// where each implementation's three keys are checked to lie in three hash
// slots. The ceilings run on the single server only.
//
// Middleware (BenchmarkMiddleware), serial and parallel, on the memory
// store: gin against ulule's gin middleware, net/http against httprate,
// fiber against fiber's own limiter, each beside a bare route of the same
// framework, so that the report compares what each middleware adds.
//
// # Fairness
//
// Every implementation sits behind the same small interface (impl): one
// call decides one request against one or three tiers, and returns whether
// it was allowed and any error. Each gets the same quota, the same keys,
// and the configuration its own documentation recommends; where a default
// would break the scenario (a key bound below the 100k keys measured, a
// connection pool smaller than the goroutines), the change is said where
// the peer is built. Peers check three tiers with three calls, in order,
// stopping at the first denial, which is how their documentation composes
// limits; none of them can do it atomically.
//
// Reported metrics besides ns/op, B/op and allocs/op: decisions/s
// (decisions without error per second of wall time), errors/op, B/key
// (1M keys); for
// Redis also cmds/decision (the commands an implementation's clients sent,
// counted by a go-redis hook or a rueidis wrapper: a script call is one, a
// read from rueidis's client-side cache none), redis-cmds/decision (every
// command Redis ran, including inside scripts, from INFO commandstats),
// local-share (the fraction of decisions answered without a round trip,
// from our stores' counters), and the CPU time per decision of redis-server
// (INFO cpu, summed over the masters of a Cluster) and of the benchmark
// process (getrusage), which tell on a small machine which side is the
// bottleneck.
package benchmarks
