package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// checkOptions are the flags of the check command.
type checkOptions struct {
	root    string
	version string
	goBin   string
	jobs    int
	keep    bool
}

// A task is one consumer the check builds: it writes what it did to log
// and fails with an error.
type task struct {
	kind string // "library", "quick start", "dependencies"
	name string
	run  func(ctx context.Context, log io.Writer) error
}

type result struct {
	task
	err  error
	log  string
	took time.Duration
}

// check runs the check command and returns the exit code.
func check(ctx context.Context, o checkOptions, out io.Writer) int {
	start := time.Now()
	fmt.Fprintf(out, "release check %s of %s\n", o.version, o.root)
	ws, err := LoadWorkspace(o.root)
	if err != nil {
		fmt.Fprintln(out, "release check:", err)
		return 1
	}
	var problems []string

	// 1. The graph, from the go.mod files alone.
	viol := append(ValidateGraph(ws, o.version), ValidateWork(ws, o.version)...)
	fmt.Fprintf(out, "\n== graph: %d modules in go.work, %d libraries\n", len(ws.Modules), len(ws.Libraries()))
	for _, v := range viol {
		fmt.Fprintln(out, "FAIL", v)
	}
	if len(viol) > 0 {
		problems = append(problems, fmt.Sprintf("%d go.mod violations", len(viol)))
	}
	for _, n := range Notes(ws, o.version) {
		fmt.Fprintln(out, "note", n)
	}

	// 2. The README: install lines and quick starts.
	readmeData, err := os.ReadFile(filepath.Join(o.root, "README.md"))
	if err != nil {
		fmt.Fprintln(out, "release check:", err)
		return 1
	}
	readme := string(readmeData)
	fmt.Fprintf(out, "\n== README.md\n")
	if errs := CheckInstall(ws, readme, o.version); len(errs) > 0 {
		for _, e := range errs {
			fmt.Fprintln(out, "FAIL", e)
		}
		problems = append(problems, fmt.Sprintf("%d README install problems", len(errs)))
	}
	qs, err := ExtractQuickStarts(readme)
	if err != nil {
		fmt.Fprintln(out, "FAIL", err)
		problems = append(problems, "malformed quick starts")
	}
	if len(qs) == 0 {
		fmt.Fprintln(out, "FAIL README.md: no quick start (<!-- quickstart: NAME METHOD TARGET --> before a ```go block)")
		problems = append(problems, "no quick start")
	}
	for _, q := range qs {
		fmt.Fprintf(out, "quick start %q (README.md:%d): %s %s\n", q.Name, q.Line, q.Method, q.Target)
	}

	// A library that requires a sibling at another version cannot be
	// installed from the proxy at all: every consumer would fail the same way.
	if slices.ContainsFunc(viol, Violation.Unresolvable) {
		took := time.Since(start).Round(time.Second)
		fmt.Fprintf(out, "\nrelease check %s: FAIL in %s: %s; consumers not built: the libraries do not require each other at %s (make tidy converts the go.mod files)\n",
			o.version, took, strings.Join(problems, "; "), o.version)
		return 1
	}

	// 3. The proxy, and consumers that install from it.
	tmp, err := os.MkdirTemp("", "release-check-")
	if err != nil {
		fmt.Fprintln(out, "release check:", err)
		return 1
	}
	env, err := newGoEnv(ctx, o.goBin, tmp)
	if err == nil {
		err = WriteProxy(env.proxy, o.version, ws.Modules...)
	}
	if err != nil {
		fmt.Fprintln(out, "release check:", err)
		os.RemoveAll(tmp)
		return 1
	}
	fmt.Fprintf(out, "\n== consumers: %d modules at %s in a file proxy, %d at a time (GOPROXY=%s)\n",
		len(ws.Modules), o.version, o.jobs, envValue(env.env, "GOPROXY"))
	c := &consumers{ws: ws, env: env, version: o.version, dir: filepath.Join(tmp, "consumers")}
	var tasks []task
	for _, m := range ws.Libraries() {
		tasks = append(tasks, task{"library", m.Dir, func(ctx context.Context, log io.Writer) error { return c.library(ctx, log, m) }})
	}
	for _, q := range qs {
		tasks = append(tasks, task{"quick start", fmt.Sprintf("%s (README.md:%d)", q.Name, q.Line), func(ctx context.Context, log io.Writer) error { return c.quickStart(ctx, log, q) }})
	}
	for _, d := range depCases() {
		tasks = append(tasks, task{"dependencies", d.name, func(ctx context.Context, log io.Writer) error { return c.deps(ctx, log, d) }})
	}
	results := runTasks(ctx, tasks, o.jobs, func(r result) {
		status := "ok  "
		if r.err != nil {
			status = "FAIL"
		}
		fmt.Fprintf(out, "%s %s %s (%.1fs)\n", status, r.kind, r.name, r.took.Seconds())
		if r.err != nil {
			fmt.Fprintln(out, indent(r.err.Error(), "    "))
		}
	})
	failed := map[string][]string{}
	for _, r := range results {
		if r.err != nil {
			failed[r.kind] = append(failed[r.kind], r.name)
		}
	}
	for _, r := range results {
		if r.kind == "dependencies" {
			fmt.Fprintf(out, "\n== dependencies of a %s consumer\n%s", r.name, r.log)
		}
	}
	for _, kind := range []string{"library", "quick start", "dependencies"} {
		if n := len(failed[kind]); n > 0 {
			problems = append(problems, fmt.Sprintf("%s failed: %s", kind, strings.Join(failed[kind], ", ")))
		}
	}

	// 4. Clean up: the module cache is read-only, go clean empties it.
	if o.keep {
		fmt.Fprintf(out, "\nkept %s (proxy/, modcache/, consumers/)\n", tmp)
	} else {
		if err := env.cleanModCache(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintln(out, "release check: cleaning the module cache:", err)
		}
		os.RemoveAll(tmp)
	}

	took := time.Since(start).Round(time.Second)
	if len(problems) > 0 {
		fmt.Fprintf(out, "\nrelease check %s: FAIL in %s: %s\n", o.version, took, strings.Join(problems, "; "))
		return 1
	}
	fmt.Fprintf(out, "\nrelease check %s: ok in %s: %d libraries, %d quick starts and %d dependency lists installed from a proxy of the working tree\n",
		o.version, took, len(ws.Libraries()), len(qs), len(depCases()))
	return 0
}

// runTasks runs tasks, at most jobs at a time, calls done as each ends,
// and returns the results in the order of tasks.
func runTasks(ctx context.Context, tasks []task, jobs int, done func(result)) []result {
	results := make([]result, len(tasks))
	next := make(chan int)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range max(1, jobs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				t := tasks[i]
				tctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				var log bytes.Buffer
				start := time.Now()
				err := t.run(tctx, &log)
				cancel()
				r := result{task: t, err: err, log: log.String(), took: time.Since(start)}
				mu.Lock()
				results[i] = r
				done(r)
				mu.Unlock()
			}
		}()
	}
	for i := range tasks {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+prefix)
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
