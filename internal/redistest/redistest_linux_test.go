package redistest_test

import "testing"

// A test binary killed outright (SIGKILL, or a -timeout panic) runs no
// cleanup: the parent-death signal must end its servers.
func TestNoServerOutlivesItsBinary(t *testing.T) {
	t.Parallel()
	pid, cmd, _ := helper(t, "hang")
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	waitGone(t, "after the test binary was killed", []int{pid})
}
