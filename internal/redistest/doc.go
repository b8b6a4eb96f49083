// Package redistest starts real redis-server processes for tests: a
// standalone server, a Redis Cluster, or a master, a replica and a Sentinel.
//
// Every server listens on a free port of 127.0.0.1, keeps its files in a
// fresh temporary directory, persists nothing (--save "" --appendonly no)
// and is stopped, and its directory removed, when the test ends, even when
// it fails or panics:
//
//	func TestStore(t *testing.T) {
//		srv := redistest.Standalone(t)
//		client := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true, Addr: srv.Addr})
//		...
//	}
//
// A test binary that shares one server among its tests starts it from
// TestMain with the Start functions, which return a stop function instead of
// registering a cleanup:
//
//	func TestMain(m *testing.M) {
//		srv, stop, err := redistest.StartStandalone()
//		if err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		addr = srv.Addr
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
//
// redis-server must be on PATH (make deps installs it). When it is not, or
// when a server does not become ready within the start timeout (20s by
// default), the test fails with a message that says why, including the end of
// the server's log; nothing is ever skipped. Redis 7.0 is the oldest version
// supported.
//
// Fault injection: [Server.Kill] ends a server with SIGKILL, [Server.Pause]
// freezes it with SIGSTOP (a hung server, for timeouts), [Server.Restart]
// brings a killed server back on the same port and directory, empty; while
// it is down its ports stay bound, without listening, so that no server of
// another test binary takes them and answers in its place. From
// Redis 7 on, DEBUG is enabled for loopback clients, so DEBUG SLEEP works too.
// [Server.Do] sends one command over a fresh connection, for what a test
// wants to check or change behind the client's back: INFO commandstats,
// CONFIG RESETSTAT, SCRIPT FLUSH, DBSIZE, CLUSTER NODES.
//
// Security: [WithTLS] makes the servers listen for TLS only, with a
// certificate from a test CA that [Server.TLSConfig] and
// [ClusterServer.TLSConfig] give clients; [WithACLUser] adds a user
// restricted by ACL rules. The harness's own connections (Do, the readiness
// and cluster checks) use TLS when the servers do, and the unrestricted
// default user.
//
// On Linux every server is started with a parent-death signal, so no
// redis-server outlives its test binary, even one killed by a -timeout panic
// or by SIGKILL. The process handling (start, readiness polling, stop by
// PID, port choice and hold, log tails) is internal/proctest's, shared with
// internal/pgtest.
//
// The package uses the standard library and internal/proctest only, so a
// store's tests pull in no Redis client but their own.
package redistest
