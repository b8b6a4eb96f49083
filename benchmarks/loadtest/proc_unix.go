//go:build unix

package main

import (
	"os"
	"syscall"
)

// terminate asks p to shut down gracefully.
func terminate(p *os.Process) { p.Signal(syscall.SIGTERM) }
