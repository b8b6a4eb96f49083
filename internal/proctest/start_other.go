//go:build !linux

package proctest

import "os/exec"

// Only Linux has a parent-death signal; elsewhere a server outlives a test
// binary that dies without running its cleanups.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }
