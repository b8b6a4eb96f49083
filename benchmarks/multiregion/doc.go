// Package multiregion simulates one global rate limit shared by several
// regions, each with its own Redis, on one machine, and compares three ways
// of enforcing it. docs/MULTIREGION.md has the numbers and a
// recommendation; TestSimulation produces them:
//
//	cd benchmarks && go test -run TestSimulation -v -count=1 ./multiregion/
//
// A region is a redis-server (started by internal/redistest) and limiter
// instances on it (core.Limiter on adapters/goredis). Regions reach each
// other only through a Net: a loopback Proxy per route that delays every
// chunk by a one-way latency and can be cut, to simulate a partition.
//
// The strategies, each a Strategy:
//
//   - Home (a): one home region per key; every region decides on the home
//     region's Redis. Exact; every remote decision pays a round trip; a
//     partition leaves the remote regions to their failure mode.
//   - Budgets (b): each region has its own bucket with a share of the limit,
//     rebalanced every epoch from the demand the regions report to each
//     other. Local decisions; the shares never sum to more than the limit;
//     a partition freezes them.
//   - Reconciled (c): each region decides on its own bucket of the whole
//     limit and charges the others' admissions, published every sync
//     interval, to it. Local decisions; over-admission bounded by the sync
//     interval (see Reconciled for the exact bound), and by the partition's
//     length during one, repaid after it.
//
// Run offers a Workload (demand per region, in phases, and an optional
// cut) to a strategy and measures admissions against the global math
// (B + L×t), against one exact bucket given the same arrivals, and the
// latency of every decision.
//
// None of this is a library feature: the package exists to measure, and
// its code is kept tested so that the numbers can be trusted.
package multiregion
