// Package proctest runs server processes for test harnesses: the process
// work that internal/redistest (redis-server) and internal/pgtest
// (PostgreSQL) share, while what tells each server apart (its command line,
// its readiness probe, initdb, cluster bus ports) stays in the harness.
//
// A [Server] is one server on a fixed port of 127.0.0.1. It starts the
// process with its output appended to a log file and polls a readiness
// probe, given by the harness, until the process answers; it stops the
// process by PID (the harness's stop signal, SIGKILL after a grace period,
// then a wait), restarts it on the same port, and holds the port while the
// server is down (see [HoldPort]), so that no other test binary takes it
// and answers in the server's place. Failures quote the end of the log.
//
// [FreePort] picks a free port that no other server of the test binary has
// been given, [TryPorts] starts again on a new port when another process
// took the chosen one first, [Cleanups] stops what one test started, all at
// once. On Linux every process is started with a parent-death signal
// ([StartCmd]), so no server outlives a test binary killed by a -timeout
// panic or by SIGKILL.
//
// [Alive], [WaitGone] and [CheckPortHeld] are for the harnesses' own tests.
//
// The package uses the standard library only.
package proctest
