package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// stopGrace is how long a server has to exit after SIGTERM before it
	// gets SIGKILL.
	stopGrace = 2 * time.Second
	// maxBindAttempts bounds the retries, each on a new port, when another
	// process binds the port between its choice and redis-server's bind.
	maxBindAttempts = 5
	// pollInterval is the pause between readiness probes.
	pollInterval = 10 * time.Millisecond
	// logTailLines is how much of a server's log a failure shows.
	logTailLines = 25
)

// errAddrInUse reports that redis-server could not bind its port.
var errAddrInUse = errors.New("address already in use")

// Server is one redis-server process (a standalone server, a cluster node,
// a replica or a sentinel) on 127.0.0.1. Its methods are safe for
// concurrent use.
type Server struct {
	// Addr is the address clients dial, "127.0.0.1:port". It does not
	// change when the server restarts.
	Addr string
	// Port is the TCP port of Addr. A cluster node's bus port is Port+10000.
	Port int

	bin     string
	args    []string
	dir     string
	timeout time.Duration
	logf    func(format string, args ...any) // nil outside a test
	// tlsConfig is the client side of WithTLS, nil without it.
	tlsConfig *tls.Config

	mu     sync.Mutex
	proc   *process // nil when not running
	closed bool     // stopped for good by the cleanup
}

// process is one run of a Server.
type process struct {
	cmd      *exec.Cmd
	done     chan struct{} // closed once Wait returned
	err      error         // Wait's result, set before done is closed
	logStart int64         // size of the log when this run began
	signaled bool          // we sent SIGTERM or SIGKILL; guarded by Server.mu
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Standalone starts one redis-server on a free loopback port and waits until
// it answers. The server is stopped and its files removed when t and its
// subtests complete, whether or not the test failed. If redis-server is
// missing or does not start, Standalone fails the test with the reason and
// the end of the server's log.
func Standalone(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cl := &cleanups{logf: t.Logf}
	t.Cleanup(cl.run)
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
		cl.run()
		return nil, nil, err
	}
	return s, cl.run, nil
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
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// Kill ends the server with SIGKILL, as a crash would, and waits until the
// process has exited: clients see their connections reset and new ones
// refused. It does nothing if the server is not running. Its directory
// stays, for Restart.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	p := s.proc
	if p == nil {
		return
	}
	p.signaled = true
	_ = p.cmd.Process.Kill()
	<-p.done
	s.proc = nil
}

// Pause freezes the server with SIGSTOP: it keeps its port and connections
// but answers nothing, as a hung server would, until Resume. Use it to test
// timeouts. It does nothing if the server is not running. A paused cluster
// node or master is declared failed by its peers or sentinel after 2s.
func (s *Server) Pause() { s.signal(sigStop) }

// Resume undoes Pause with SIGCONT; the server answers what it received
// meanwhile.
func (s *Server) Resume() { s.signal(sigCont) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && sig != nil {
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Restart starts the server again on the same port and directory, killing
// it first if it is still running, and waits until it answers. It
// comes back empty (nothing is persisted, so scripts must be loaded again); a
// cluster node keeps its node id and slots in its nodes.conf and rejoins the
// cluster, for which [ClusterServer.WaitHealthy] waits. Restart fails t if
// the server does not come back within the start timeout.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.restart(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	deadline := time.Now().Add(s.timeout)
	for {
		err := s.startLocked(deadline)
		if err == nil || !errors.Is(err, errAddrInUse) || time.Now().After(deadline) {
			return err
		}
		// The port is ours but something holds it, perhaps briefly: wait for it.
		time.Sleep(100 * time.Millisecond)
	}
}

// start runs the server's first process and waits until it is ready.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(time.Now().Add(s.timeout))
}

func (s *Server) startLocked(deadline time.Time) error {
	if s.closed {
		return fmt.Errorf("redistest: %s: start after the server was stopped by its cleanup", s.Addr)
	}
	p, err := s.spawn()
	if err != nil {
		return err
	}
	s.proc = p
	if err := s.waitReady(p, deadline); err != nil {
		s.killLocked()
		return err
	}
	return nil
}

// spawn starts one process, its output appended to redis.log in its
// directory.
func (s *Server) spawn() (*process, error) {
	logFile, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	var logStart int64
	if fi, err := logFile.Stat(); err == nil {
		logStart = fi.Size()
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := startProcess(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("redistest: start %s: %w", s.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), logStart: logStart}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls until the process answers on s.Addr. It asks INFO server
// for the process id rather than sending PING, so that another process that
// took the port cannot pass for this one.
func (s *Server) waitReady(p *process, deadline time.Time) error {
	want := strconv.Itoa(p.cmd.Process.Pid)
	for {
		if p.exited() {
			tail := s.logTail(p.logStart)
			if strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("redistest: %s: %w", s.Addr, errAddrInUse)
			}
			return fmt.Errorf("redistest: redis-server for %s exited during startup (%v); end of %s:\n%s",
				s.Addr, p.err, s.logPath(), tail)
		}
		v, err := do(s.Addr, s.tlsConfig, 500*time.Millisecond, "INFO", "server")
		if err == nil {
			info, _ := v.(string)
			pid := infoField(info, "process_id")
			if pid == want {
				return nil
			}
			err = fmt.Errorf("process_id %q answered, want %s", pid, want)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server for %s not ready after %v: %v; end of %s:\n%s",
				s.Addr, s.timeout, err, s.logPath(), s.logTail(p.logStart))
		}
		time.Sleep(pollInterval)
	}
}

// died reports whether the process exited without being told to, with the
// end of its log.
func (s *Server) died() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.diedLocked()
}

// running reports whether the server has a live process.
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// stop ends the server for good: SIGTERM, SIGKILL after stopGrace, wait,
// remove the directory. It is idempotent.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	if msg, ok := s.diedLocked(); ok && s.logf != nil {
		s.logf("%s", msg)
	}
	if p := s.proc; p != nil {
		p.signaled = true
		_ = p.cmd.Process.Signal(sigTerm)
		if sigCont != nil {
			_ = p.cmd.Process.Signal(sigCont) // a paused process must run to exit
		}
		select {
		case <-p.done:
		case <-time.After(stopGrace):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		s.proc = nil
	}
	_ = os.RemoveAll(s.dir)
}

func (s *Server) diedLocked() (string, bool) {
	if s.proc == nil || !s.proc.exited() || s.proc.signaled {
		return "", false
	}
	return fmt.Sprintf("redistest: redis-server for %s exited on its own (%v); end of %s:\n%s",
		s.Addr, s.proc.err, s.logPath(), s.logTail(s.proc.logStart)), true
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "redis.log") }

// logTail returns the last lines of the server's log written after offset
// from, that is by one run.
func (s *Server) logTail(from int64) string {
	f, err := os.Open(s.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	const window = 8 << 10
	if fi, err := f.Stat(); err == nil {
		_, _ = f.Seek(max(from, fi.Size()-window), io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
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
	for attempt := 1; ; attempt++ {
		port, err := freePort(bus)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "redistest-"+strconv.Itoa(port)+"-")
		if err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		s := &Server{
			Addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			Port:    port,
			bin:     b.path,
			dir:     dir,
			timeout: cfg.startTimeout,
			logf:    cl.logf,
		}
		cl.add(s.stop)
		if cfg.certs != nil {
			if err := cfg.certs.write(dir); err != nil {
				return nil, err
			}
			s.tlsConfig = cfg.certs.client
		}
		if s.args, err = argsFor(b, port, dir); err != nil {
			return nil, err
		}
		err = s.start()
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errAddrInUse) || attempt == maxBindAttempts {
			return nil, err
		}
		s.stop()
	}
}

// Ports handed out by this binary, never reused, so that two servers of one
// test binary cannot race for the same port.
var (
	portsMu    sync.Mutex
	portsTaken = map[int]bool{}
)

// freePort picks a port that is free on 127.0.0.1 now, and with bus, whose
// port+10000 is free too (so port <= 55535).
func freePort(bus bool) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var lastErr error
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: no free port on 127.0.0.1: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := !portsTaken[port]
		if ok && bus {
			if port+10000 > 65535 || portsTaken[port+10000] {
				ok = false
			} else if bl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000))); err != nil {
				ok, lastErr = false, err
			} else {
				bl.Close()
			}
		}
		l.Close()
		if ok {
			portsTaken[port] = true
			if bus {
				portsTaken[port+10000] = true
			}
			return port, nil
		}
	}
	return 0, fmt.Errorf("redistest: no free port pair (port, port+10000) on 127.0.0.1 after 200 tries: %v", lastErr)
}

// cleanups collects the stop functions of what one test started; run calls
// them all at once and is idempotent.
type cleanups struct {
	logf func(format string, args ...any) // t.Logf, or nil

	mu  sync.Mutex
	fns []func()
}

func (c *cleanups) add(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, f)
}

func (c *cleanups) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	// Concurrently: a cluster's nodes stop in one grace period, not six.
	var wg sync.WaitGroup
	for _, f := range fns {
		wg.Go(f)
	}
	wg.Wait()
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
