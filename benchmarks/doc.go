// Package benchmarks compares this project's limiter with peer libraries:
// speed (go test -bench) and correctness under concurrency (TestAdmission*).
// It is a module of its own, so that no peer library ever enters the
// requirements of a library module; it runs outside the workspace, through
// its replace directives:
//
//	cd benchmarks && GOWORK=off go test -run '^$' -bench . -benchmem .
//	cd benchmarks && GOWORK=off go test -run '^TestAdmission' -v .
//	cd benchmarks && GOWORK=off go run ./cmd/report -bench bench.txt
//
// # Names
//
// Every benchmark is named Benchmark<Group>/<Scenario>[/g=<goroutines>]/impl=<name>,
// one sub-benchmark per implementation of the same scenario, so that
// cmd/report (and benchstat -col /impl) can pair ours with the peers. Impl
// names starting with "ours" are this project, names starting with
// "ceiling_" are reference points that decide nothing (a bare PING, or our
// script sent alone, one EVALSHA per decision), and every other name is a
// peer library. cmd/report handles any group with that shape, so the HTTP
// middleware comparisons (BenchmarkMiddleware/<Scenario>/impl=ours_gin,
// impl=ours_fiber, impl=ours_nethttp against the peers' middleware) belong
// in a middleware_test.go here once those adapters exist, with no change to
// the report.
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
// (decisions without error per second of wall time) and errors/op; for
// Redis also cmds/decision (the commands an implementation's clients sent,
// counted by a go-redis hook or a rueidis wrapper: a script call is one, a
// read from rueidis's client-side cache none), redis-cmds/decision (every
// command Redis ran, including inside scripts, from INFO commandstats),
// local-share (the fraction of decisions answered without a round trip,
// from our stores' counters), and the CPU time per decision of redis-server
// (INFO cpu) and of the benchmark process (getrusage), which tell on a small
// machine which side is the bottleneck.
package benchmarks
