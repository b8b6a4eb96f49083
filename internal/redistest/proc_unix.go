//go:build unix

package redistest

import (
	"os"
	"syscall"
)

// The signals of Pause and Resume.
var (
	sigStop os.Signal = syscall.SIGSTOP
	sigCont os.Signal = syscall.SIGCONT
)
