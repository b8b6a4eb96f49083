// Package redistests holds the tests of the Redis stores, adapters/goredis
// and adapters/rueidis, that need more than the standard library and the
// store's own client: real redis-server processes (internal/redistest), the
// shared conformance suite, goleak. It is a module of its own, as
// OpenTelemetry contrib keeps its instrumentations' test modules, so that
// none of that enters a store's go.mod: a store's user downloads only the
// store's client.
//
// The tests of each store are in the subdirectories goredis and rueidis
// (test files only). This package is what they share: the distributed
// exactness test and the comparison with the memory store, each run
// against both stores through a constructor, the conformance harness, a
// fake RESP server for faults a real server never produces, and the
// benchmark body.
package redistests
