package redistest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Linux delivers the parent-death signal when the thread that forked the
// child exits, not the process (prctl(2), PR_SET_PDEATHSIG). Go may retire
// threads, so every server is forked from one goroutine locked to its thread
// for the life of the test binary: the signal then fires only when the binary
// itself dies, which is what ends a redis-server left behind by a -timeout
// panic, os.Exit or SIGKILL.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnRequest
)

type spawnRequest struct {
	cmd *exec.Cmd
	res chan<- error
}

func startProcess(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
			for r := range spawnCh {
				r.res <- r.cmd.Start()
			}
		}()
	})
	res := make(chan error, 1)
	spawnCh <- spawnRequest{cmd, res}
	return <-res
}
