package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// machine describes where the benchmarks ran, as far as this machine can
// tell: the report is written on the machine that ran them.
type machine struct {
	cpu     string // model name
	cpus    int    // logical CPUs (nproc)
	memory  string
	kernel  string
	goVer   string
	redis   string
	commit  string
	written time.Time
}

func readMachine() machine {
	m := machine{cpus: runtime.NumCPU(), written: time.Now().UTC()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("nproc").Output(); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil {
			m.cpus = n
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) >= 2 && f[0] == "MemTotal:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					m.memory = fmt.Sprintf("%.1f GiB", kb/(1<<20))
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = runtime.GOOS + " " + strings.TrimSpace(string(b))
	} else {
		m.kernel = runtime.GOOS
	}
	m.goVer = command("go", "version")
	m.redis = command("redis-server", "--version")
	m.commit = command("git", "rev-parse", "--short", "HEAD")
	if st := command("git", "status", "--porcelain", "--untracked-files=no"); st != "" && !strings.HasPrefix(st, "unknown") {
		m.commit += " (with uncommitted changes)"
	}
	return m
}

// command runs a short command and returns its trimmed output, or
// "unknown (why)".
func command(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return fmt.Sprintf("unknown (%s: %v)", name, err)
	}
	return strings.TrimSpace(string(out))
}

// module is one requirement of the benchmarks module.
type module struct{ path, version string }

// readRequirements returns the direct requirements of the go.mod at path,
// other than this project's own modules.
func readRequirements(path string) ([]module, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var mods []module
	inBlock := false
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "require (":
			inBlock = true
			continue
		case inBlock && line == ")":
			inBlock = false
			continue
		case strings.HasPrefix(line, "require "):
			line = strings.TrimPrefix(line, "require ")
		case !inBlock:
			continue
		}
		if strings.Contains(line, "// indirect") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || strings.HasPrefix(f[0], "github.com/bucketry/") {
			continue
		}
		mods = append(mods, module{f[0], f[1]})
	}
	return mods, nil
}

// profile reruns one benchmark alone with a profile and returns the
// command and pprof's top functions: a CPU profile, or for a verdict on
// memory (v.profile "heap") or allocations ("allocs") a memory profile read
// as the bytes or the objects allocated. It runs in the workspace, as the
// measurements do, so that our modules are those of the working tree. dir
// receives the profile and the test binary.
func profile(v verdict, dir, benchtime string) (cmdline, top string, err error) {
	slug := strings.NewReplacer("/", "_", "=", "-").Replace(v.scenario + "_" + v.impl)
	flag, sample := "-cpuprofile", ""
	switch v.profile {
	case "heap":
		flag, sample = "-memprofile", "alloc_space"
	case "allocs":
		flag, sample = "-memprofile", "alloc_objects"
	}
	prof := filepath.Join(dir, slug+".cpu.prof")
	if v.profile != "" {
		prof = filepath.Join(dir, slug+"."+v.profile+".prof")
	}
	args := []string{"test", "-run", "^$", "-bench", v.profileBench(), "-benchtime", benchtime, "-count", "1",
		flag, prof, "-o", filepath.Join(dir, "benchmarks.test"), "."}
	cmdline = "go " + shellJoin(args)
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return cmdline, "", fmt.Errorf("%v: %s", err, lastLines(string(out), 20))
	}
	pprofArgs := []string{"tool", "pprof", "-top", "-nodecount", "25"}
	if sample != "" {
		pprofArgs = append(pprofArgs, "-sample_index", sample)
	}
	if v.profile == "heap" {
		// What the implementation allocates while its keys are created,
		// not the subjects the benchmark builds beforehand.
		pprofArgs = append(pprofArgs, "-focus", `benchmarks\.prime`)
	}
	out, err := exec.Command("go", append(pprofArgs, prof)...).CombinedOutput()
	if err != nil {
		return cmdline, "", fmt.Errorf("pprof: %v: %s", err, lastLines(string(out), 20))
	}
	return cmdline, string(out), nil
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " $^*?[]()|'\"\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
