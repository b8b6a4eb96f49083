// Package conformance is the shared test suite that every ratelimit store
// passes: the in-memory store of package core, and the Redis stores (go-redis
// and rueidis, standalone and Cluster), each from its own module's tests.
//
// A store's test describes how to build and inspect the store with a
// StoreHarness and calls RunStoreSuite and RunPropertySuite:
//
//	func TestMemoryStore(t *testing.T) {
//		h := conformance.StoreHarness{
//			New: func(t testing.TB, clock core.Clock) core.Store {
//				s, err := core.NewMemoryStore(core.WithClock(clock))
//				if err != nil {
//					t.Fatal(err)
//				}
//				return s
//			},
//		}
//		conformance.RunStoreSuite(t, h)
//		conformance.RunPropertySuite(t, h)
//	}
//
// RunStoreSuite checks the store contract of DESIGN.md sections 3 to 6 on
// hand-computed timelines, one subtest per case and algorithm: exact bursts,
// refill, costs, multi-tier all or nothing, every algorithm's boundaries,
// exact RetryAfter, expiry, key isolation, concurrency, bad input and the
// explicit time of a Take. RunPropertySuite compares the store, on random
// sequences from a fixed seed, with plain reference models of the algorithms
// written in exact rational arithmetic, independently of core's math.
//
// Every timeline is told in named instants relative to t0 (midnight UTC,
// 1 January 2026, a whole number of days after the Unix epoch), and time moves
// only through the core.ManualClock handed to StoreHarness.New or through a
// Take's explicit Now: nothing sleeps. Failures read like
// "Take(t0+500ms, cost 1) = denied, want allowed".
//
// The suite uses only the core.Store interface and the harness, so a store
// passes it by its behaviour, not by its internals. It imports only core and
// the standard library.
package conformance
