package proctest

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A test binary killed outright (SIGKILL, or a -timeout panic) runs no
// cleanup: the parent-death signal must end its servers, even one running
// as another user (when the tests run as root, the server runs as nobody,
// as pgtest's postgres runs as the user postgres).
func TestNoServerOutlivesItsBinary(t *testing.T) {
	t.Parallel()
	var env []string
	root := os.Geteuid() == 0
	if root {
		env = append(env, envHelperBin+"="+copyForNobody(t))
	}
	pid, cmd, out := helper(t, "hang", env...)
	if root {
		if uid := UIDOf(t, pid); uid == 0 {
			t.Errorf("the server runs as uid 0, want nobody's:\n%s", out)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	WaitGone(t, "after the test binary was killed", pid)
}

// copyForNobody copies the test binary into a directory the user nobody
// can enter (the go build directory is private), and returns its path.
func copyForNobody(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "proctest-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "proctest.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
