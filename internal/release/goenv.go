package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// goEnv runs the go command as a user outside the workspace would: module
// mode without go.work, the project's modules at the release version from
// a file proxy of the working tree, everything else from the module cache
// or the usual proxy, into a module cache of its own.
//
// Builds pass -trimpath: without it the build cache keys each package by
// its directory, which in a fresh module cache is new on every run, so
// nothing would be reused from one run to the next.
type goEnv struct {
	goBin    string
	env      []string
	proxy    string // the file proxy's directory
	modcache string // the fresh module cache
}

// newGoEnv prepares the environment under tmp (proxy/ and modcache/).
func newGoEnv(ctx context.Context, goBin, tmp string) (*goEnv, error) {
	out, err := exec.CommandContext(ctx, goBin, "env", "GOPROXY", "GOMODCACHE", "GONOSUMDB").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	v := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(v) != 3 {
		return nil, fmt.Errorf("go env: unexpected output %q", out)
	}
	userProxy, userCache, nosum := v[0], v[1], v[2]
	e := &goEnv{goBin: goBin, proxy: filepath.Join(tmp, "proxy"), modcache: filepath.Join(tmp, "modcache")}
	for _, d := range []string{e.proxy, e.modcache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The working tree's modules first, then the modules already in the
	// usual cache (so they are not downloaded again), then the usual proxy.
	proxies := []string{fileURL(e.proxy)}
	if userCache != "" {
		proxies = append(proxies, fileURL(filepath.Join(userCache, "cache", "download")))
	}
	if userProxy != "" {
		proxies = append(proxies, userProxy)
	}
	if nosum == "" {
		nosum = rootPath
	} else {
		nosum += "," + rootPath
	}
	set := map[string]string{
		"GOWORK":      "off",
		"GOTOOLCHAIN": "local",
		"GOFLAGS":     "-mod=mod",
		"GONOSUMDB":   nosum,
		"GOPROXY":     strings.Join(proxies, ","),
		// A fresh cache: one keeps each version it has seen for good, so a
		// reused one would serve an earlier copy of this same version.
		"GOMODCACHE": e.modcache,
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); set[k] == "" {
			e.env = append(e.env, kv)
		}
	}
	for k, val := range set {
		e.env = append(e.env, k+"="+val)
	}
	return e, nil
}

func fileURL(dir string) string { return "file://" + filepath.ToSlash(dir) }

// run runs go with args in dir and returns its standard output. An error
// carries the command and the end of its standard error.
func (e *goEnv) run(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, e.goBin, args...)
	cmd.Dir = dir
	cmd.Env = e.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 30))
	}
	return out, nil
}

// cleanModCache empties the fresh module cache, whose files the go command
// makes read-only.
func (e *goEnv) cleanModCache(ctx context.Context) error {
	_, err := e.run(ctx, os.TempDir(), "clean", "-modcache")
	return err
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// consumerModule makes a directory for a fresh consumer module named name
// under dir, with a go.mod from go mod init.
func (e *goEnv) consumerModule(ctx context.Context, dir, name string) (string, error) {
	d := filepath.Join(dir, name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	_, err := e.run(ctx, d, "mod", "init", "example.com/consumer/"+name)
	return d, err
}
