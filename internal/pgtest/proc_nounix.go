//go:build !unix

package pgtest

import (
	"os"
	"os/exec"
)

// Without Unix signals, stopping kills at once.
var sigStop os.Signal = os.Kill

// account is never needed off Unix: there is no root to avoid.
type account struct{}

func unprivileged() (*account, error) { return nil, nil }

func (a *account) setUser(*exec.Cmd) {}

func (a *account) give(string) error { return nil }
