package proctest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is its own server: run with envPort set, it serves
// instead of testing (see serveFake).
const (
	envPort = "PROCTEST_FAKE_PORT"
	envMode = "PROCTEST_FAKE_MODE"
)

func TestMain(m *testing.M) {
	if port := os.Getenv(envPort); port != "" {
		os.Exit(serveFake(port, os.Getenv(envMode)))
	}
	os.Exit(m.Run())
}

// serveFake listens on 127.0.0.1:port and answers every connection with its
// pid, so that answersPid can tell it from another server. mode changes
// that: "exit" exits at once, "mute" answers nothing (never ready),
// "ignore-term" ignores SIGTERM (only SIGKILL ends it). A port that is
// taken makes it exit with Go's "bind: address already in use".
func serveFake(port, mode string) int {
	fmt.Printf("fake server pid %d starting on port %s\n", os.Getpid(), port)
	switch mode {
	case "exit":
		fmt.Println("fake server: exiting on purpose")
		return 3
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		if mode != "mute" {
			fmt.Fprintf(c, "%d\n", os.Getpid())
		}
		// Let the client close first, as with a real server's clients:
		// the side that closes first keeps the port in TIME_WAIT, which
		// no one can bind without SO_REUSEADDR, HoldPort included.
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
}

// answersPid is the fake server's readiness probe: it connects to addr
// and wants pid in the answer.
func answersPid(addr string) ReadyFunc {
	return func(pid int, _ time.Time) error {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(line); got != strconv.Itoa(pid) {
			return fmt.Errorf("pid %s answered, want %d", got, pid)
		}
		return nil
	}
}

// fakeCommand builds the fake server's command line.
func fakeCommand(port int, mode, dir string) func() *exec.Cmd {
	return func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), envPort+"="+strconv.Itoa(port), envMode+"="+mode)
		return cmd
	}
}

// newFake returns a fake server on port, not started, closed by t's
// cleanup.
func newFake(t testing.TB, port int, mode string, opts ...Option) *Server {
	t.Helper()
	dir := t.TempDir()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s, err := NewServer("fake", port, filepath.Join(dir, "fake.log"), fakeCommand(port, mode, dir), answersPid(addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// startFake starts a fake server on a free port and fails t if it does not
// become ready.
func startFake(t testing.TB, mode string, opts ...Option) *Server {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := newFake(t, port, mode, opts...)
	if err := s.Start(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return s
}

// checkAnswers fails t unless s's running process answers.
func checkAnswers(t testing.TB, s *Server) {
	t.Helper()
	pid := s.Pid()
	if pid == 0 || !Alive(pid) {
		t.Fatalf("Pid() = %d, want a running process", pid)
	}
	if err := answersPid(s.Addr())(pid, time.Now().Add(time.Second)); err != nil {
		t.Fatalf("%s does not answer: %v", s.Addr(), err)
	}
}
