package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// ReadyFunc is one readiness probe of a server: it returns nil once the
// process with id pid answers on the server's address. Asking the server
// for something only that process knows (its pid, its data directory),
// rather than just connecting, keeps a server of another test binary that
// took the port from passing for it. deadline is when the start gives up;
// one probe should return well before it (within a second or so), so that
// the Server notices a process that exited.
type ReadyFunc func(pid int, deadline time.Time) error

// Server runs one server process at a time on a fixed port of 127.0.0.1:
// it starts it and waits until it is ready, stops it, restarts it on the
// same port, and holds its ports while it is down (see [HoldPort]). Every
// run appends its output to the same log; failures quote the end of what
// that run wrote. Its methods are safe for concurrent use: Start, Restart,
// Kill, Stop and Close run one at a time, each waiting for the one before.
type Server struct {
	pkg     string
	addr    string
	ports   []int // the port, then WithHeldPorts
	logPath string
	command func() *exec.Cmd
	ready   ReadyFunc
	cfg     config

	// op serializes the changes of state, across their waits for the
	// process; mu guards the fields below and is never held across one,
	// so that Pid, Running and Died answer during a restart.
	op     sync.Mutex
	mu     sync.Mutex
	proc   *process // nil when not running
	closed bool     // stopped for good by Close
	held   []func() // the ports held while down
}

// Option changes a Server made by [NewServer].
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

type config struct {
	startTimeout time.Duration
	stopSignal   os.Signal
	stopGrace    time.Duration
	pollInterval time.Duration
	heldPorts    []int
	logf         func(format string, args ...any)
}

// WithStartTimeout bounds how long [Server.Restart] waits for the server to
// be ready (20s by default); failures quote it.
func WithStartTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.startTimeout = d })
}

// WithStopSignal sets the signal [Server.Stop] and [Server.Close] send to
// end the server (SIGTERM by default; PostgreSQL's fast shutdown is SIGINT).
// Off Unix every stop kills.
func WithStopSignal(sig os.Signal) Option {
	return optionFunc(func(c *config) { c.stopSignal = sig })
}

// WithStopGrace sets how long a server has to exit after the stop signal
// before it gets SIGKILL (2s by default).
func WithStopGrace(d time.Duration) Option {
	return optionFunc(func(c *config) { c.stopGrace = d })
}

// WithPollInterval sets the pause between two readiness probes (10ms by
// default).
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.pollInterval = d })
}

// WithHeldPorts names more ports of the server, held with its own while it
// is down (a Redis Cluster node's bus port). None by default.
func WithHeldPorts(ports ...int) Option {
	return optionFunc(func(c *config) { c.heldPorts = append(c.heldPorts, ports...) })
}

// WithLogf gives [Server.Close] a log, such as t.Logf, for a server that
// exited on its own: the exit status and the end of its log. Nil (the
// default) says nothing.
func WithLogf(logf func(format string, args ...any)) Option {
	return optionFunc(func(c *config) { c.logf = logf })
}

// NewServer returns a Server on 127.0.0.1:port, not started. pkg is the
// name its messages start with, the harness's package ("redistest");
// logPath the file every run's output is appended to; command builds the
// command of one run (a new *exec.Cmd each call: path, arguments,
// directory, environment, credentials; the Server sets its output and
// starts it with [StartCmd]); ready the readiness probe.
func NewServer(pkg string, port int, logPath string, command func() *exec.Cmd, ready ReadyFunc, opts ...Option) (*Server, error) {
	c := config{startTimeout: 20 * time.Second, stopSignal: sigTerm, stopGrace: 2 * time.Second, pollInterval: 10 * time.Millisecond}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("proctest: NewServer: option %d is nil", i)
		}
		o.apply(&c)
	}
	switch {
	case pkg == "":
		return nil, errors.New("proctest: NewServer: pkg must not be empty")
	case logPath == "":
		return nil, errors.New("proctest: NewServer: logPath must not be empty")
	case command == nil || ready == nil:
		return nil, errors.New("proctest: NewServer: command and ready must not be nil")
	case c.startTimeout <= 0:
		return nil, fmt.Errorf("proctest: WithStartTimeout: timeout must be > 0, got %v", c.startTimeout)
	case c.stopSignal == nil:
		return nil, errors.New("proctest: WithStopSignal: signal must not be nil")
	case c.stopGrace <= 0:
		return nil, fmt.Errorf("proctest: WithStopGrace: grace must be > 0, got %v", c.stopGrace)
	case c.pollInterval <= 0:
		return nil, fmt.Errorf("proctest: WithPollInterval: interval must be > 0, got %v", c.pollInterval)
	}
	ports := append([]int{port}, c.heldPorts...)
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("proctest: NewServer: port must be in [1, 65535], got %d", p)
		}
	}
	return &Server{
		pkg:     pkg,
		addr:    net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		ports:   ports,
		logPath: logPath,
		command: command,
		ready:   ready,
		cfg:     c,
	}, nil
}

// Addr returns the address the server listens on, "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// Start starts the server's first run and waits, until deadline, for it to
// be ready. On failure nothing is left running, and the error quotes the
// end of the log; it wraps [ErrAddrInUse] if the server could not bind its
// port. Start of a running server, or after Close, fails: Restart starts
// the later runs.
func (s *Server) Start(deadline time.Time) error {
	s.op.Lock()
	defer s.op.Unlock()
	if s.Pid() != 0 {
		return fmt.Errorf("%s: %s: start of a running server; Restart it instead", s.pkg, s.addr)
	}
	return s.start(deadline)
}

func (s *Server) start(deadline time.Time) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("%s: %s: start after the server was stopped by its cleanup", s.pkg, s.addr)
	}
	p, err := spawn(s.command(), s.logPath)
	if err != nil {
		return fmt.Errorf("%s: %w", s.pkg, err)
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	if err := s.waitReady(p, deadline); err != nil {
		p.kill()
		s.mu.Lock()
		s.proc = nil
		s.mu.Unlock()
		return err
	}
	return nil
}

// waitReady polls until p answers, exits or the deadline passes.
func (s *Server) waitReady(p *process, deadline time.Time) error {
	for {
		if p.exited() {
			tail := p.logTail()
			if addrInUse(tail) {
				return fmt.Errorf("%s: %s: %w", s.pkg, s.addr, ErrAddrInUse)
			}
			return fmt.Errorf("%s: %s for %s exited during startup (%v); end of %s:\n%s",
				s.pkg, p.name, s.addr, p.err, s.logPath, tail)
		}
		err := s.ready(p.pid(), deadline)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s for %s not ready after %v: %v; end of %s:\n%s",
				s.pkg, p.name, s.addr, s.cfg.startTimeout, err, s.logPath, p.logTail())
		}
		time.Sleep(s.cfg.pollInterval)
	}
}

// Restart starts the server again on the same port, and waits until it is
// ready, within the start timeout. A running server is stopped first: with
// SIGKILL, as a crash would, or, graceful, as [Server.Stop] does. If the
// port is bound by someone else (the hold failed, or a process of another
// test binary took it before), Restart waits for it, up to the timeout.
// Restart after Close fails.
func (s *Server) Restart(graceful bool) error {
	s.op.Lock()
	defer s.op.Unlock()
	s.end(graceful)
	s.release()
	deadline := time.Now().Add(s.cfg.startTimeout)
	for {
		err := s.start(deadline)
		if err == nil || !errors.Is(err, ErrAddrInUse) || time.Now().After(deadline) {
			return err
		}
		// The port is ours but something holds it, perhaps briefly.
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill ends the server with SIGKILL, as a crash would, waits until the
// process has exited, and holds its ports until Restart or Close. It does
// nothing if the server is not running.
func (s *Server) Kill() {
	s.op.Lock()
	defer s.op.Unlock()
	if s.end(false) {
		s.hold()
	}
}

// Stop ends the server with the stop signal (see [WithStopSignal]),
// SIGKILL if it has not exited after the grace period, waits until it has
// exited, and holds its ports until Restart or Close. It does nothing if
// the server is not running.
func (s *Server) Stop() {
	s.op.Lock()
	defer s.op.Unlock()
	if s.end(true) {
		s.hold()
	}
}

// Close stops the server for good, as Stop does, and releases its ports;
// it reports through [WithLogf] a process that had exited on its own.
// Start and Restart fail after it. It is idempotent.
func (s *Server) Close() {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	s.release()
	if msg, ok := s.Died(); ok && s.cfg.logf != nil {
		s.cfg.logf("%s", msg)
	}
	s.end(true)
}

// Signal sends sig to the running process (SIGSTOP and SIGCONT pause and
// resume it). It does nothing if the server is not running or sig is nil.
func (s *Server) Signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && sig != nil {
		_ = s.proc.cmd.Process.Signal(sig)
	}
}

// Pid returns the process id of the running server, or 0 when it is not
// running.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid()
}

// Running reports whether the server has a live process.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Died reports whether the server's process exited without being told to,
// and if so says how, with the end of its log.
func (s *Server) Died() (string, bool) {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil || !p.exited() || p.signaled.Load() {
		return "", false
	}
	return fmt.Sprintf("%s: %s for %s exited on its own (%v); end of %s:\n%s",
		s.pkg, p.name, s.addr, p.err, s.logPath, p.logTail()), true
}

// end stops the running process, if any, with SIGKILL or, graceful, with
// the stop signal, and reports whether there was one. The caller holds op.
func (s *Server) end(graceful bool) bool {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return false
	}
	if graceful {
		p.stop(s.cfg.stopSignal, s.cfg.stopGrace)
	} else {
		p.kill()
	}
	s.mu.Lock()
	s.proc = nil
	s.mu.Unlock()
	return true
}

// hold holds the server's ports; a port that cannot be held is left free.
// The caller holds op.
func (s *Server) hold() {
	var held []func()
	for _, port := range s.ports {
		if release, err := HoldPort(port); err == nil {
			held = append(held, release)
		}
	}
	s.mu.Lock()
	s.held = append(s.held, held...)
	s.mu.Unlock()
}

// release lets the held ports go.
func (s *Server) release() {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, r := range held {
		r()
	}
}
