package proctest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The test binary run again by helper: envHelper says how its test ends,
// envPidFile where it writes its server's pid, envHelperBin (optional) a
// copy of the binary that the user nobody can run, to run the server as
// nobody.
const (
	envHelper    = "PROCTEST_HELPER"
	envPidFile   = "PROCTEST_PIDFILE"
	envHelperBin = "PROCTEST_HELPER_BIN"
)

// TestHelperProcess starts a fake server as a harness does (its Close
// registered with Cleanups, whose Run is the test's cleanup), pauses it,
// writes its pid to $PROCTEST_PIDFILE and ends as $PROCTEST_HELPER says:
// "fatal", "panic", or "hang" until killed. Without that variable it does
// nothing.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		return
	}
	var cl Cleanups
	t.Cleanup(cl.Run)
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	command := fakeCommand(port, "", dir)
	if bin := os.Getenv(envHelperBin); bin != "" {
		plain := command
		command = func() *exec.Cmd {
			cmd := plain()
			if err := runAsNobody(cmd, bin); err != nil {
				t.Error(err)
			}
			cmd.Dir = filepath.Dir(bin)
			return cmd
		}
	}
	s, err := NewServer("fake", port, filepath.Join(dir, "fake.log"), command, answersPid("127.0.0.1:"+strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	cl.Add(s.Close)
	if err := s.Start(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	s.Signal(sigStop) // the cleanup must end a paused server too
	if err := os.WriteFile(os.Getenv(envPidFile), []byte(strconv.Itoa(s.Pid())), 0o644); err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "fatal":
		t.Fatal("helper: failing on purpose")
	case "panic":
		panic("helper: panicking on purpose")
	case "hang":
		select {} // until the parent kills the binary
	}
}

// helper runs TestHelperProcess in a child test binary, with env added to
// its environment, and returns the pid of the server it started, once
// written, and the child.
func helper(t *testing.T, mode string, env ...string) (int, *exec.Cmd, *strings.Builder) {
	t.Helper()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	// TMPDIR: a killed child leaves its server's directory, which t.TempDir
	// removes.
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envPidFile+"="+pidFile, "TMPDIR="+dir)
	cmd.Env = append(cmd.Env, env...)
	out := new(strings.Builder)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(pidFile); err == nil && len(b) > 0 {
			pid, err := strconv.Atoi(string(b))
			if err != nil {
				t.Fatal(err)
			}
			return pid, cmd, out
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("helper %s wrote no pid:\n%s", mode, out)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A test that fails or panics still runs its cleanups, which stop its
// servers, paused ones included.
func TestCleanupOnFailure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ mode, output string }{
		{"fatal", "helper: failing on purpose"},
		{"panic", "helper: panicking on purpose"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			pid, cmd, out := helper(t, tc.mode)
			if err := cmd.Wait(); err == nil || !strings.Contains(out.String(), tc.output) {
				t.Fatalf("helper %s: exit %v, want a failure with %q:\n%s", tc.mode, err, tc.output, out)
			}
			WaitGone(t, "after a test that ends with "+tc.mode, pid)
		})
	}
}
