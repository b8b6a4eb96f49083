package proctest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// TailLines is how many lines of a log [Tail] keeps, and so how much of a
// server's log a failure quotes.
const TailLines = 25

// StartCmd starts cmd as cmd.Start does. On Linux the process gets SIGKILL
// when the test binary dies (PR_SET_PDEATHSIG), even if the binary is killed
// without running its cleanups; the signal is added to cmd.SysProcAttr,
// whatever else it holds (a Credential, for instance). The caller waits for
// cmd as usual. It is safe for concurrent use.
func StartCmd(cmd *exec.Cmd) error { return startCmd(cmd) }

// process is one run of a Server.
type process struct {
	cmd      *exec.Cmd
	name     string // the program, for messages: "redis-server"
	logPath  string
	logStart int64         // size of the log when this run began
	done     chan struct{} // closed once Wait returned
	err      error         // Wait's result, set before done is closed
	signaled atomic.Bool   // we sent the stop signal or SIGKILL
}

// spawn starts cmd with its output appended to the file at logPath.
func spawn(cmd *exec.Cmd, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var logStart int64
	if fi, err := logFile.Stat(); err == nil {
		logStart = fi.Size()
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := startCmd(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, name: filepath.Base(cmd.Path), logPath: logPath, logStart: logStart, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL and waits until the process has exited.
func (p *process) kill() {
	p.signaled.Store(true)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends sig (and SIGCONT, so that a paused process runs to handle
// it), SIGKILL if the process has not exited after grace, and waits.
func (p *process) stop(sig os.Signal, grace time.Duration) {
	p.signaled.Store(true)
	_ = p.cmd.Process.Signal(sig)
	if sigCont != nil {
		_ = p.cmd.Process.Signal(sigCont)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
	}
}

// logTail is the end of what this run wrote to the log.
func (p *process) logTail() string { return logTail(p.logPath, p.logStart) }

// logTail returns the last lines of the log at path written after offset
// from.
func logTail(path string, from int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	// Enough for TailLines lines of any sane log, without reading all of
	// a long one.
	const window = 8 << 10
	if fi, err := f.Stat(); err == nil {
		_, _ = f.Seek(max(from, fi.Size()-window), io.SeekStart)
	}
	b, _ := io.ReadAll(f)
	return Tail(string(b))
}

// Tail returns the last [TailLines] lines of text, without its final
// newline: what a failure quotes of a command's output. It is pure.
func Tail(text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) > TailLines {
		lines = lines[len(lines)-TailLines:]
	}
	return strings.Join(lines, "\n")
}
