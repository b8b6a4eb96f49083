package proctest

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// Linux delivers the parent-death signal when the thread that forked the
// child exits, not the process (prctl(2), PR_SET_PDEATHSIG). Go may retire
// threads, so every process is forked from one goroutine locked to its
// thread for the life of the test binary: the signal then fires only when
// the binary itself dies. It survives a change of user asked for in
// cmd.SysProcAttr.Credential: the runtime sets it after switching
// credentials.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnRequest
)

type spawnRequest struct {
	cmd *exec.Cmd
	res chan<- error
}

// spawnLoop forks every process, from its goroutine's thread. It never
// returns: a goroutine leak check ignores it by this name,
// github.com/bucketry/ratelimit/internal/proctest.spawnLoop.
func spawnLoop(reqs <-chan spawnRequest) {
	runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
	for r := range reqs {
		r.res <- r.cmd.Start()
	}
}

func startCmd(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnRequest)
		go spawnLoop(spawnCh)
	})
	res := make(chan error, 1)
	spawnCh <- spawnRequest{cmd, res}
	return <-res
}
