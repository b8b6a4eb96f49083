package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/mod/semver"
)

const usage = `usage:
	release check -version v0.1.0 [-root DIR] [-j 2] [-keep]
	release tidy -version v0.1.0 [-root DIR] [-keep]

check  installs every module of the working tree at the version, as a user
       outside the workspace would, and runs the README quick starts.
tidy   requires the project's modules at the version in every go.mod, drops
       their replace directives and runs go mod tidy in each module.
`

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "check" && os.Args[1] != "tidy") {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd := os.Args[1]
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	version := fs.String("version", "", "the release `version` (vX.Y.Z)")
	root := fs.String("root", "", "the workspace `directory` (default: the directory of go env GOWORK)")
	goBin := fs.String("go", "go", "the go `command`")
	jobs := fs.Int("j", 2, "consumers built at a time")
	keep := fs.Bool("keep", false, "keep the temporary proxy, module cache and consumers")
	fs.Parse(os.Args[2:])
	if fs.NArg() > 0 {
		fs.Usage()
		os.Exit(2)
	}
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version || semver.Build(*version) != "" {
		fmt.Fprintf(os.Stderr, "release %s: -version %q: want a release version such as v0.1.0\n", cmd, *version)
		os.Exit(2)
	}
	if semver.Major(*version) != "v0" && semver.Major(*version) != "v1" {
		// A v2+ module has the major version in its path; the project has
		// none yet.
		fmt.Fprintf(os.Stderr, "release %s: -version %s: the module paths have no /%s suffix\n", cmd, *version, semver.Major(*version))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := workspaceRoot(ctx, *goBin, *root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "release %s: %v\n", cmd, err)
		os.Exit(1)
	}
	var out io.Writer = os.Stdout
	switch cmd {
	case "check":
		os.Exit(check(ctx, checkOptions{root: dir, version: *version, goBin: *goBin, jobs: *jobs, keep: *keep}, out))
	case "tidy":
		if err := tidy(ctx, tidyOptions{root: dir, version: *version, goBin: *goBin, keep: *keep}, out); err != nil {
			fmt.Fprintf(os.Stderr, "release tidy: %v\n", err)
			os.Exit(1)
		}
	}
}

// workspaceRoot returns dir made absolute, or the directory of the go.work
// that the go command uses here.
func workspaceRoot(ctx context.Context, goBin, dir string) (string, error) {
	if dir == "" {
		out, err := exec.CommandContext(ctx, goBin, "env", "GOWORK").Output()
		if err != nil {
			return "", fmt.Errorf("go env GOWORK: %w", err)
		}
		work := strings.TrimSpace(string(out))
		if work == "" || work == "off" {
			return "", fmt.Errorf("no go.work here: run in the workspace or pass -root")
		}
		dir = filepath.Dir(work)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(abs, "go.work")); err != nil {
		return "", err
	}
	return abs, nil
}
