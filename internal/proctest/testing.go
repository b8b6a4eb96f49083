package proctest

import (
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Alive reports whether pid is a running process. A zombie, which an init
// that does not reap may leave around, counts as gone. It reads /proc where
// there is one, else sends signal 0.
func Alive(pid int) bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// pid (comm) state ...; comm may hold spaces and parentheses.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		return len(f) > 0 && f[0] != "Z" && f[0] != "X"
	} else if _, statErr := os.Stat("/proc/self/stat"); statErr == nil {
		return false // /proc works and the pid is not in it
	}
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}

// WaitGone fails t unless every process of pids has exited within 10s, and
// kills those that have not, so that a failing test leaks nothing either.
// what says when, for the message: "after the cleanup".
func WaitGone(t testing.TB, what string, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for Alive(pid) {
			if time.Now().After(deadline) {
				t.Errorf("%s: pid %d still running", what, pid)
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// CheckPortHeld fails t unless addr ("127.0.0.1:port") refuses connections
// and cannot be bound: what [HoldPort] promises while a server is down.
func CheckPortHeld(t testing.TB, addr string) {
	t.Helper()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("dial %s while the server is down: connected, want refused", addr)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Errorf("listen on %s while the server is down: succeeded, want the port held", addr)
	}
}

// UIDOf returns the real user id of the running process pid, from
// /proc/pid/status (Linux), and fails t if it cannot be read.
func UIDOf(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				if uid, err := strconv.Atoi(f[0]); err == nil {
					return uid
				}
			}
			break
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}
