package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/internal/proctest"
)

// pollInterval is the pause between readiness probes, and between checks
// of a topology.
const pollInterval = 10 * time.Millisecond

// Server is one redis-server process (a standalone server, a cluster node,
// a replica or a sentinel) on 127.0.0.1. Its methods are safe for
// concurrent use.
type Server struct {
	// Addr is the address clients dial, "127.0.0.1:port". It does not
	// change when the server restarts.
	Addr string
	// Port is the TCP port of Addr. A cluster node's bus port is Port+10000.
	Port int

	dir string // the server's files, removed by stop
	// tlsConfig is the client side of WithTLS, nil without it.
	tlsConfig *tls.Config
	// svc runs the process; nil until launch made it.
	svc *proctest.Server
}

// cleanups are the stops of what one Standalone, Cluster or Sentinel
// started, and the test's log for servers found dead by them.
type cleanups struct {
	proctest.Cleanups
	logf func(format string, args ...any) // t.Logf, or nil
}

// Standalone starts one redis-server on a free loopback port and waits until
// it answers. The server is stopped and its files removed when t and its
// subtests complete, whether or not the test failed. If redis-server is
// missing or does not start, Standalone fails the test with the reason and
// the end of the server's log.
func Standalone(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cl := &cleanups{logf: t.Logf}
	t.Cleanup(cl.Run)
	s, err := startStandalone(cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// StartStandalone is [Standalone] for TestMain and other code without a
// testing.TB: it returns a function that stops the server and removes its
// files, which the caller must call (a second call does nothing). On error
// everything started is already stopped.
func StartStandalone(opts ...Option) (*Server, func(), error) {
	cl := &cleanups{}
	s, err := startStandalone(cl, opts)
	if err != nil {
		cl.Run()
		return nil, nil, err
	}
	return s, cl.Run, nil
}

func startStandalone(cl *cleanups, opts []Option) (*Server, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return launch(cfg, cl, false, func(b binary, port int, dir string) ([]string, error) {
		return dataArgs(cfg, b, port, dir), nil
	})
}

// Do sends one command to the server on a new connection and returns its
// reply: simple and bulk strings as string, integers as int64, arrays as
// []any, nil bulk strings and arrays as nil. An error reply is returned as a
// [ReplyError] (inside an array, as an element). The connection, and so the
// command, counts in the server's statistics: INFO commandstats shows the
// commands Do sent. Do gives up after 5s, for example on a paused server.
func (s *Server) Do(args ...string) (any, error) {
	return do(s.Addr, s.tlsConfig, doTimeout, args...)
}

// CommandCalls returns how many times each command ran since the server
// started or since CONFIG RESETSTAT, from INFO commandstats, keyed by the
// name Redis reports: "evalsha", "eval", "get", and from Redis 7 on
// "script|load" for a subcommand. Commands sent with Do count too, earlier
// CommandCalls as "info" (this call's own INFO is not in its result). It
// fails t if INFO cannot be read.
func (s *Server) CommandCalls(t testing.TB) map[string]int64 {
	t.Helper()
	v, err := s.Do("INFO", "commandstats")
	text, ok := v.(string)
	if err != nil || !ok {
		t.Fatalf("redistest: %s: INFO commandstats = %v, %v", s.Addr, v, err)
	}
	calls, err := parseCommandStats(text)
	if err != nil {
		t.Fatalf("redistest: %s: %v", s.Addr, err)
	}
	return calls
}

// parseCommandStats reads lines such as
// "cmdstat_evalsha:calls=3,usec=40,usec_per_call=13.33,...".
func parseCommandStats(text string) (map[string]int64, error) {
	calls := make(map[string]int64)
	for line := range strings.SplitSeq(text, "\n") {
		name, stats, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for kv := range strings.SplitSeq(stats, ",") {
			if n, ok := strings.CutPrefix(kv, "calls="); ok {
				c, err := strconv.ParseInt(n, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("malformed commandstats line %q", line)
				}
				calls[name] = c
			}
		}
	}
	return calls, nil
}

// Pid returns the process id of the running server, or 0 when it is not
// running (after Kill, or after the cleanup).
func (s *Server) Pid() int { return s.svc.Pid() }

// Kill ends the server with SIGKILL, as a crash would, and waits until the
// process has exited: clients see their connections reset and new ones
// refused. It does nothing if the server is not running. Its directory
// stays, for Restart. While the server is down its ports (with a cluster
// node's bus port) stay bound, without listening, so that a server of
// another test binary cannot take them and answer in its place; this is
// best effort.
func (s *Server) Kill() { s.svc.Kill() }

// Pause freezes the server with SIGSTOP: it keeps its port and connections
// but answers nothing, as a hung server would, until Resume. Use it to test
// timeouts. It does nothing if the server is not running. A paused cluster
// node or master is declared failed by its peers or sentinel after 2s.
func (s *Server) Pause() { s.svc.Signal(sigStop) }

// Resume undoes Pause with SIGCONT; the server answers what it received
// meanwhile.
func (s *Server) Resume() { s.svc.Signal(sigCont) }

// Restart starts the server again on the same port and directory, killing
// it first if it is still running, and waits until it answers. It
// comes back empty (nothing is persisted, so scripts must be loaded again); a
// cluster node keeps its node id and slots in its nodes.conf and rejoins the
// cluster, for which [ClusterServer.WaitHealthy] waits. Restart fails t if
// the server does not come back within the start timeout.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.svc.Restart(false); err != nil {
		t.Fatal(err)
	}
}

// RestartErr is Restart for a program that is not a test (a load test's
// driver): it returns the error Restart would fail the test with.
func (s *Server) RestartErr() error { return s.svc.Restart(false) }

// ready is the readiness probe. It asks INFO server for the process id
// rather than sending PING, so that another process that took the port
// cannot pass for this one.
func (s *Server) ready(pid int, _ time.Time) error {
	v, err := do(s.Addr, s.tlsConfig, 500*time.Millisecond, "INFO", "server")
	if err != nil {
		return err
	}
	info, _ := v.(string)
	if got := infoField(info, "process_id"); got != strconv.Itoa(pid) {
		return fmt.Errorf("process_id %q answered, want %d", got, pid)
	}
	return nil
}

// died reports whether the process exited without being told to, with the
// end of its log.
func (s *Server) died() (string, bool) { return s.svc.Died() }

// running reports whether the server has a live process.
func (s *Server) running() bool { return s.svc.Running() }

// stop ends the server for good (SIGTERM, SIGKILL after 2s, wait) and
// removes its directory. It is idempotent.
func (s *Server) stop() {
	if s.svc != nil {
		s.svc.Close()
	}
	_ = os.RemoveAll(s.dir)
}

// binary is the redis-server executable and its major version (0 if it
// could not be read).
type binary struct {
	path  string
	major int
}

var majors sync.Map // path -> int

func findBinary() (binary, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return binary{}, errors.New("redistest: redis-server not found: install it with `apt-get install redis-server` (Debian/Ubuntu) or run `make deps`")
	}
	if m, ok := majors.Load(path); ok {
		return binary{path, m.(int)}, nil
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return binary{}, fmt.Errorf("redistest: %s --version: %w", path, err)
	}
	m := parseMajor(string(out))
	majors.Store(path, m)
	return binary{path, m}, nil
}

// parseMajor reads 7 from "Redis server v=7.0.15 sha=...".
func parseMajor(version string) int {
	_, v, ok := strings.Cut(version, "v=")
	if !ok {
		return 0
	}
	v, _, _ = strings.Cut(v, ".")
	m, _ := strconv.Atoi(v)
	return m
}

// dataArgs is the command line of a server that holds data.
func dataArgs(cfg *config, b binary, port int, dir string, extra ...string) []string {
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		// A full sync would otherwise wait 5s for more replicas (the
		// default since Redis 7, with diskless sync).
		"--repl-diskless-sync-delay", "0",
	}
	if b.major >= 7 {
		// DEBUG SLEEP and friends for fault injection; and no waiting for
		// lagging replicas on SIGTERM, since the data is thrown away.
		args = append(args, "--enable-debug-command", "local", "--shutdown-on-sigterm", "now")
	}
	if cfg.certs != nil {
		args = append(args, tlsArgs(port, dir)...)
	}
	for _, u := range cfg.users {
		args = append(args, u.args()...)
	}
	args = append(args, extra...)
	return append(args, cfg.args...)
}

// launch starts a new server on a fresh port and directory, built by
// argsFor, registers its stop with cl before waiting for it, and retries on a
// new port when the chosen one was taken meanwhile. bus asks for a port whose
// cluster bus port (port+10000) is free too.
func launch(cfg *config, cl *cleanups, bus bool, argsFor func(b binary, port int, dir string) ([]string, error)) (*Server, error) {
	b, err := findBinary()
	if err != nil {
		return nil, err
	}
	var offsets []int
	if bus {
		offsets = []int{10000}
	}
	var s *Server
	err = proctest.TryPorts(func() (int, error) { return proctest.FreePort(offsets...) }, func(port int) error {
		dir, err := os.MkdirTemp("", "redistest-"+strconv.Itoa(port)+"-")
		if err != nil {
			return fmt.Errorf("redistest: %w", err)
		}
		s = &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir}
		cl.Add(s.stop)
		if cfg.certs != nil {
			if err := cfg.certs.write(dir); err != nil {
				return err
			}
			s.tlsConfig = cfg.certs.client
		}
		args, err := argsFor(b, port, dir)
		if err != nil {
			return err
		}
		command := func() *exec.Cmd {
			cmd := exec.Command(b.path, args...)
			cmd.Dir = dir
			return cmd
		}
		opts := []proctest.Option{proctest.WithStartTimeout(cfg.startTimeout), proctest.WithLogf(cl.logf)}
		if bus {
			opts = append(opts, proctest.WithHeldPorts(port+10000))
		}
		if s.svc, err = proctest.NewServer("redistest", port, filepath.Join(dir, "redis.log"), command, s.ready, opts...); err != nil {
			return err
		}
		err = s.svc.Start(time.Now().Add(cfg.startTimeout))
		if errors.Is(err, proctest.ErrAddrInUse) {
			s.stop() // before the next port
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// waitFor polls cond until it returns nil, one of nodes dies, or the
// deadline passes.
func waitFor(deadline time.Time, timeout time.Duration, what string, nodes []*Server, cond func() error) error {
	for {
		for _, n := range nodes {
			if msg, ok := n.died(); ok {
				return fmt.Errorf("redistest: %s: %s", what, msg)
			}
		}
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s: not done after %v: %w", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// infoField returns the value of field in an INFO reply ("" if absent).
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":"); ok && k == field {
			return v
		}
	}
	return ""
}
