package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// Start, Kill, Stop, Restart and Close, each in turn, on one server.
func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	s := startFake(t, "")
	checkAnswers(t, s)
	addr := s.Addr()
	if err := s.Start(time.Now().Add(time.Second)); err == nil || !strings.Contains(err.Error(), "start of a running server") {
		t.Fatalf("Start of a running server = %v, want an error", err)
	}

	first := s.Pid()
	s.Kill()
	if Alive(first) || s.Pid() != 0 || s.Running() {
		t.Fatalf("after Kill: pid %d alive = %v, Pid() = %d, Running() = %v; want gone, 0, false", first, Alive(first), s.Pid(), s.Running())
	}
	if msg, died := s.Died(); died {
		t.Errorf("Died() after Kill = %q, true; want false", msg)
	}
	CheckPortHeld(t, addr)
	s.Kill() // not running: nothing

	if err := s.Restart(false); err != nil {
		t.Fatal(err)
	}
	checkAnswers(t, s)
	if s.Addr() != addr || s.Pid() == first {
		t.Fatalf("after Restart: Addr %q, Pid %d; want %q and a new pid", s.Addr(), s.Pid(), addr)
	}

	second := s.Pid()
	s.Stop()
	if Alive(second) || s.Pid() != 0 {
		t.Fatalf("after Stop: pid %d alive = %v, Pid() = %d; want gone and 0", second, Alive(second), s.Pid())
	}
	CheckPortHeld(t, addr)
	s.Stop() // not running: nothing

	if err := s.Restart(true); err != nil {
		t.Fatal(err)
	}
	third := s.Pid()
	// Restarting a running server stops it first.
	for _, graceful := range []bool{false, true} {
		if err := s.Restart(graceful); err != nil {
			t.Fatal(err)
		}
		WaitGone(t, fmt.Sprintf("after Restart(%v) of a running server", graceful), third)
		checkAnswers(t, s)
		third = s.Pid()
	}

	s.Close()
	WaitGone(t, "after Close", third)
	s.Close() // idempotent
	if err := s.Restart(false); err == nil || !strings.Contains(err.Error(), "fake: "+addr+": start after the server was stopped by its cleanup") {
		t.Fatalf("Restart after Close = %v, want a start-after-cleanup error", err)
	}
	if s.Pid() != 0 {
		t.Fatalf("Pid() after a refused Restart = %d, want 0", s.Pid())
	}
}

// Close of a server killed or stopped lets its held ports go.
func TestCloseReleasesPorts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		down func(*Server)
	}{
		{"after Kill", (*Server).Kill},
		{"after Stop", (*Server).Stop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bus, err := FreePort()
			if err != nil {
				t.Fatal(err)
			}
			s := startFake(t, "", WithHeldPorts(bus))
			tc.down(s)
			busAddr := net.JoinHostPort("127.0.0.1", fmt.Sprint(bus))
			CheckPortHeld(t, busAddr)
			s.Close()
			for _, a := range []string{s.Addr(), busAddr} {
				l, err := net.Listen("tcp", a)
				if err != nil {
					t.Fatalf("listen on %s after Close: %v, want the port free", a, err)
				}
				l.Close()
			}
		})
	}
}

// Restart waits, within the start timeout, for its port to be free again.
func TestRestartWaitsForItsPort(t *testing.T) {
	t.Parallel()
	s := startFake(t, "")
	s.Kill()
	// Let the port go, as if holding it had failed, so that something else
	// takes it for a while.
	s.release()
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, func() { l.Close() })
	if err := s.Restart(false); err != nil {
		t.Fatalf("Restart while the port is taken for 300ms: %v", err)
	}
	checkAnswers(t, s)
}

// A start that fails leaves nothing running and says why.
func TestStartFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mode    string
		taken   bool // the port is bound before the start
		timeout time.Duration
		want    []string
		is      error
	}{
		{"exits", "exit", false, 20 * time.Second, []string{"fake: proctest.test for 127.0.0.1:", " exited during startup (exit status 3); end of ", "fake server: exiting on purpose"}, nil},
		{"never ready", "mute", false, 300 * time.Millisecond, []string{" not ready after 300ms: read tcp ", "i/o timeout; end of ", "fake server pid "}, nil},
		{"port taken", "", true, 20 * time.Second, []string{"address already in use"}, ErrAddrInUse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			port, err := FreePort()
			if err != nil {
				t.Fatal(err)
			}
			if tc.taken {
				l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(port)))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			s := newFake(t, port, tc.mode, WithStartTimeout(tc.timeout))
			err = s.Start(time.Now().Add(tc.timeout))
			if err == nil {
				t.Fatal("Start = nil, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Start error = %q, want it to contain %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Start error = %v, want one that is %v", err, tc.is)
			}
			if s.Pid() != 0 || s.Running() {
				t.Errorf("after a failed Start: Pid() = %d, Running() = %v; want 0, false", s.Pid(), s.Running())
			}
		})
	}
}

// A server that exits without being told to is reported by Died and by
// Close's log.
func TestDied(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var logged []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	s := startFake(t, "", WithLogf(logf))
	if _, died := s.Died(); died {
		t.Fatal("Died() of a running server = true")
	}
	p, err := os.FindProcess(s.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Running() {
		if time.Now().After(deadline) {
			t.Fatal("Running() still true 10s after the process was killed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	msg, died := s.Died()
	want := "fake: proctest.test for " + s.Addr() + " exited on its own (signal: killed); end of "
	if !died || !strings.Contains(msg, want) || !strings.Contains(msg, "fake server pid ") {
		t.Fatalf("Died() = %q, %v; want true and %q with the log", msg, died, want)
	}
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(logged) != 1 || logged[0] != msg {
		t.Fatalf("Close logged %q, want [%q]", logged, msg)
	}
}

func TestNewServerErrors(t *testing.T) {
	t.Parallel()
	cmd := fakeCommand(1, "", "")
	ready := answersPid("127.0.0.1:1")
	for _, tc := range []struct {
		name    string
		pkg     string
		port    int
		logPath string
		opts    []Option
		want    string
	}{
		{"nil option", "x", 1, "log", []Option{nil}, "proctest: NewServer: option 0 is nil"},
		{"no pkg", "", 1, "log", nil, "proctest: NewServer: pkg must not be empty"},
		{"no log", "x", 1, "", nil, "proctest: NewServer: logPath must not be empty"},
		{"port 0", "x", 0, "log", nil, "proctest: NewServer: port must be in [1, 65535], got 0"},
		{"held port too high", "x", 1, "log", []Option{WithHeldPorts(70000)}, "proctest: NewServer: port must be in [1, 65535], got 70000"},
		{"zero timeout", "x", 1, "log", []Option{WithStartTimeout(0)}, "proctest: WithStartTimeout: timeout must be > 0, got 0s"},
		{"nil signal", "x", 1, "log", []Option{WithStopSignal(nil)}, "proctest: WithStopSignal: signal must not be nil"},
		{"zero grace", "x", 1, "log", []Option{WithStopGrace(0)}, "proctest: WithStopGrace: grace must be > 0, got 0s"},
		{"zero interval", "x", 1, "log", []Option{WithPollInterval(0)}, "proctest: WithPollInterval: interval must be > 0, got 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewServer(tc.pkg, tc.port, tc.logPath, cmd, ready, tc.opts...)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("NewServer = %v, %v; want the error %q", s, err, tc.want)
			}
		})
	}
	if _, err := NewServer("x", 1, "log", nil, ready); err == nil {
		t.Error("NewServer with a nil command = nil error")
	}
}
