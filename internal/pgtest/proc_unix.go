//go:build unix

package pgtest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// sigStop asks for PostgreSQL's fast shutdown: SIGINT ends every session
// and exits at once, cleanly. SIGTERM would be the smart shutdown, which
// waits for the clients (a test's idle pool) to disconnect.
var sigStop os.Signal = syscall.SIGINT

// account is the unprivileged user the server runs as when the test binary
// runs as root; nil otherwise.
type account struct {
	name     string
	uid, gid uint32
}

// runAsUsers are the accounts tried, in order, for a root test binary:
// initdb and postgres refuse to run as root.
var runAsUsers = []string{"postgres", "nobody"}

// unprivileged returns the account to run the server as: nil when the
// binary does not run as root, else the first of runAsUsers that exists.
func unprivileged() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range runAsUsers {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return &account{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("pgtest: running as root, and initdb and postgres refuse to: no unprivileged user %q to run them as (create one, or run the tests as another user)", runAsUsers)
}

// setUser makes cmd run as a.
func (a *account) setUser(cmd *exec.Cmd) {
	if a == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid, NoSetGroups: true}
}

// give makes a the owner of dir and everything in it, after checking that
// a can reach dir: every directory above it must let others in.
func (a *account) give(dir string) error {
	if a == nil {
		return nil
	}
	for up := filepath.Dir(dir); ; up = filepath.Dir(up) {
		fi, err := os.Stat(up)
		if err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgtest: the server runs as user %s, who cannot enter %s (mode %v): set TMPDIR to a directory every user can enter, such as /tmp", a.name, up, fi.Mode().Perm())
		}
		if up == filepath.Dir(up) {
			break
		}
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(path, int(a.uid), int(a.gid)); err != nil {
			return errors.Join(fmt.Errorf("pgtest: give %s to user %s", path, a.name), err)
		}
		return nil
	})
}
