package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bucketry/ratelimit/internal/proctest"
)

// build compiles the example servers of frameworks into dir, from the
// workspace at root (so the servers are those of the working tree), and
// returns their paths by framework.
func build(ctx context.Context, root, dir string, frameworks []string) (map[string]string, error) {
	bins := make(map[string]string)
	for _, fw := range frameworks {
		bin := filepath.Join(dir, fw)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/"+fw)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("loadtest: go build ./examples/%s: %w\n%s", fw, err, out)
		}
		bins[fw] = bin
	}
	return bins, nil
}

// An instance is one running example server.
type instance struct {
	cmd     *exec.Cmd
	addr    string // the API's address
	metrics string // the metrics address; empty with -no-limit
	done    chan struct{}
	waitErr error
	mu      sync.Mutex
	log     strings.Builder // the end of its standard error
}

// startInstance runs bin with args and waits until it says where it
// listens ("listening on ADDR", and "metrics on ADDR" unless args hold
// -no-limit), for up to 20s.
func startInstance(bin string, args ...string) (*instance, error) {
	args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	// StartCmd: on Linux the server dies with the load test, however it
	// dies.
	if err := proctest.StartCmd(cmd); err != nil {
		return nil, fmt.Errorf("loadtest: start %s: %w", filepath.Base(bin), err)
	}
	in := &instance{cmd: cmd, done: make(chan struct{})}
	wantMetrics := !containsArg(args, "-no-limit")
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			in.mu.Lock()
			if in.log.Len() < 1<<16 {
				in.log.WriteString(line + "\n")
			}
			if _, a, ok := strings.Cut(line, "listening on "); ok && in.addr == "" {
				in.addr = strings.TrimSpace(a)
			}
			if _, a, ok := strings.Cut(line, "metrics on "); ok && in.metrics == "" {
				in.metrics = strings.TrimSpace(a)
			}
			up := in.addr != "" && (in.metrics != "" || !wantMetrics)
			in.mu.Unlock()
			if up && !signalled {
				signalled = true
				close(ready)
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() {
		in.waitErr = cmd.Wait()
		close(in.done)
	}()
	select {
	case <-ready:
		return in, nil
	case <-in.done:
		return nil, fmt.Errorf("loadtest: %s %s exited at start (%v):\n%s", filepath.Base(bin), strings.Join(args, " "), in.waitErr, in.logTail())
	case <-time.After(20 * time.Second):
		in.stop()
		return nil, fmt.Errorf("loadtest: %s %s did not start listening within 20s:\n%s", filepath.Base(bin), strings.Join(args, " "), in.logTail())
	}
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

func (in *instance) logTail() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.log.String()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// stop ends the instance with SIGTERM (a graceful shutdown), and SIGKILL
// after 10s.
func (in *instance) stop() error {
	select {
	case <-in.done:
		return nil
	default:
	}
	terminate(in.cmd.Process)
	select {
	case <-in.done:
		return nil
	case <-time.After(10 * time.Second):
		in.cmd.Process.Kill()
		<-in.done
		return fmt.Errorf("loadtest: pid %d did not stop within 10s of SIGTERM", in.cmd.Process.Pid)
	}
}

// cpu returns the CPU time the instance has used so far, from /proc;
// ok is false where /proc has no such file.
func (in *instance) cpu() (time.Duration, bool) {
	return procCPU(in.cmd.Process.Pid)
}

// procCPU returns the user + system CPU time of process pid from
// /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: fields count from
	// the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// utime and stime are fields 14 and 15 of the line, 12 and 13 after
	// the name (state is the first).
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	// Clock ticks: 100 per second on every Linux the tests run on
	// (USER_HZ is fixed at 100 for user space).
	return time.Duration(ut+st) * 10 * time.Millisecond, true
}

// scrape reads the instance's Prometheus metrics and returns the samples
// whose names start with prefix, by name with labels as written.
func (in *instance) scrape(ctx context.Context, prefix string) (map[string]float64, error) {
	if in.metrics == "" {
		return nil, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+in.metrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("loadtest: GET /metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body, prefix)
}

// parseMetrics reads the Prometheus text format: "name{labels} value".
func parseMetrics(r io.Reader, prefix string) (map[string]float64, error) {
	out := make(map[string]float64)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, prefix) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("loadtest: metrics line %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("loadtest: metrics line %q: %w", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// stopAll stops every instance and joins their errors.
func stopAll(ins []*instance) error {
	var errs []error
	for _, in := range ins {
		if in != nil {
			errs = append(errs, in.stop())
		}
	}
	return errors.Join(errs...)
}
