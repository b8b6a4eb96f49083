// Package pgtest starts real PostgreSQL servers for tests: initdb into a
// fresh temporary directory, postgres on a free port of 127.0.0.1, a
// database created, and everything stopped and removed when the test ends,
// even when it fails or panics:
//
//	func TestRules(t *testing.T) {
//		srv := pgtest.Start(t)
//		pool, err := pgxpool.New(ctx, srv.URL())
//		...
//	}
//
// A test binary that shares one server among its tests starts it from
// TestMain with [StartServer], which returns a stop function instead of
// registering a cleanup.
//
// The server trusts every connection (it listens on loopback only, and on a
// Unix socket in its own directory) and has one superuser, [Superuser];
// [Server.URL] is a connection string for pgx, pgxpool or lib/pq. It runs
// without fsync: a clean Stop and Restart keep the data, nothing else is
// promised.
//
// initdb and postgres are taken from PATH, else from the newest
// /usr/lib/postgresql/*/bin (where Debian and Ubuntu put them). When they
// are missing, or the server does not start within the start timeout (30s
// by default), the test fails with a message that says why, including the
// end of the server's log; nothing is ever skipped. Install them with the
// postgresql package (make deps does, as root).
//
// initdb and postgres refuse to run as root. A test binary running as root
// runs them as the user postgres, or else nobody, and gives it the server's
// directory; that user must be able to enter the temporary directory
// (TMPDIR, /tmp by default), which the harness checks.
//
// Fault injection: [Server.Stop] shuts the server down as an operator would
// (PostgreSQL's fast shutdown: sessions are ended, new connections refused),
// [Server.Restart] brings it back on the same port with its data. While it
// is down its port stays bound, without listening, so that no server of
// another test binary takes it and answers in its place.
// [Server.Exec] and [Server.Query] run SQL behind a client's back.
//
// On Linux every server is started with a parent-death signal, so no
// postgres outlives its test binary, even one killed by a -timeout panic or
// by SIGKILL. The process handling (start, readiness polling, stop by PID,
// port choice and hold, log tails) is internal/proctest's, shared with
// internal/redistest.
//
// The package uses the standard library and internal/proctest only (it
// speaks the little of the PostgreSQL protocol it needs itself), so a test
// pulls in no driver but its own.
package pgtest
