//go:build unix

package proctest

import (
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"
	"time"
)

var sigStop os.Signal = syscall.SIGSTOP

// runAsNobody makes cmd run bin, as the user nobody.
func runAsNobody(cmd *exec.Cmd, bin string) error {
	u, err := user.Lookup("nobody")
	if err != nil {
		return err
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return syscall.EINVAL
	}
	cmd.Path, cmd.Args[0] = bin, bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}}
	return nil
}

// A server that ignores the stop signal is killed after the grace period;
// a paused one gets SIGCONT with the stop signal, and exits at once.
func TestStopGrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		mode     string
		pause    bool
		grace    time.Duration
		min, max time.Duration
	}{
		{"ignores SIGTERM", "ignore-term", false, 300 * time.Millisecond, 300 * time.Millisecond, 5 * time.Second},
		{"paused", "", true, 10 * time.Second, 0, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startFake(t, tc.mode, WithStopGrace(tc.grace))
			pid := s.Pid()
			if tc.pause {
				s.Signal(sigStop)
			}
			start := time.Now()
			s.Stop()
			if d := time.Since(start); d < tc.min || d > tc.max {
				t.Errorf("Stop took %v, want between %v and %v", d, tc.min, tc.max)
			}
			if Alive(pid) || s.Pid() != 0 {
				t.Errorf("after Stop: pid %d alive = %v, Pid() = %d; want gone and 0", pid, Alive(pid), s.Pid())
			}
		})
	}
}
