//go:build !unix

package proctest

import (
	"errors"
	"os"
	"os/exec"
)

var sigStop os.Signal

func runAsNobody(*exec.Cmd, string) error { return errors.New("no other users off Unix") }
