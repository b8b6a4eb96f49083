// Command loadtest drives the example servers (examples/gin,
// examples/nethttp) over real HTTP with vegeta at a constant request rate,
// on every store (in memory, standalone Redis, a 3-master Redis Cluster;
// go-redis and rueidis), beside a baseline of the same servers without the
// middleware, and a run through a Redis outage. It checks every bucket's
// admitted requests against the exact math, measures the latency the
// limiter adds and the Redis CPU it costs, and writes LOADTEST.md with SVG
// plots.
//
//	make loadtest                                   # the whole run, about 8 minutes
//	cd benchmarks/loadtest && go run . -rate 1000 -duration 10s -only 'gin (none|redis/go-redis)'
//
// It exits with status 1 when a bucket admitted more than the math allows,
// when a target fails to answer (more than 1% of its requests failed, or it
// did not start), or when a run could not be made. Everything listens on
// 127.0.0.1; anonymous clients leave from 127.0.1.x, which Linux routes to
// the loopback interface.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/bucketry/ratelimit/internal/redistest"
)

// config is the command line.
type config struct {
	Rate     int
	Duration time.Duration
	Users    int
	Seed     uint64
	Only     string // a regexp: run only the targets whose names match
	Outage   bool
	Peak     bool
	Out      string // the report; empty: none
	Plots    string // the directory of the SVG plots, relative to Out's
	Root     string // the workspace; empty: the go command's
}

func main() {
	var cfg config
	flag.IntVar(&cfg.Rate, "rate", 1000, "requests per `second`, constant")
	flag.DurationVar(&cfg.Duration, "duration", 30*time.Second, "how long each target is driven: it is sent rate x duration requests, a little later than that when the machine falls behind")
	flag.IntVar(&cfg.Users, "users", 1000, "users on the free and pro plans, besides the hot user")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "the workload's random `seed`")
	flag.StringVar(&cfg.Only, "only", "", "run only the targets whose names match this `regexp` (\"gin redis/go-redis\")")
	flag.BoolVar(&cfg.Outage, "outage", true, "also run gin on standalone Redis through a 5s redis-server outage")
	flag.BoolVar(&cfg.Peak, "peak", true, "also drive gin for 10s each on the Cluster at 2,000 req/s and on standalone Redis at 3,000 req/s, each beside its baseline")
	flag.StringVar(&cfg.Out, "out", "", "write the report to this Markdown `file`, and its plots beside it")
	flag.StringVar(&cfg.Plots, "plots", "benchmarks/loadtest/plots", "the plots' `directory`, relative to the report's")
	flag.StringVar(&cfg.Root, "root", "", "the workspace's `directory` (default: the go command's GOWORK's)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Args); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

// errFailed is a run that measured a failure: over-admission or a target
// that did not answer.
var errFailed = errors.New("loadtest: failed")

// peakDuration is the length of each peak run: gin at higher rates, for
// what the machine sustains.
const peakDuration = 10 * time.Second

// targets returns every target, in the order they run.
func targets(outage, peak bool) []target {
	var ts []target
	for _, fw := range []string{"gin", "nethttp"} {
		ts = append(ts,
			target{Framework: fw, Store: "none", Instances: 2},
			target{Framework: fw, Store: "memory", Instances: 1},
		)
		for _, store := range []string{"redis", "cluster"} {
			for _, cl := range []string{"go-redis", "rueidis"} {
				ts = append(ts, target{Framework: fw, Store: store, Client: cl, Instances: 2})
			}
		}
	}
	if peak {
		// The Cluster at 2,000/s, standalone Redis at 3,000/s, each beside
		// the baseline at its rate: the most each sustains here (the Cluster
		// spends three script calls per request of this policy).
		for _, p := range []struct {
			store string
			rate  int
		}{{"cluster", 2000}, {"redis", 3000}} {
			ts = append(ts,
				target{Framework: "gin", Store: "none", Instances: 2, Rate: p.rate, Duration: peakDuration},
				target{Framework: "gin", Store: p.store, Client: "go-redis", Instances: 2, Rate: p.rate, Duration: peakDuration},
			)
		}
	}
	if outage {
		ts = append(ts, target{Framework: "gin", Store: "redis", Client: "go-redis", Instances: 2,
			Outage: true, OutageAt: 10 * time.Second, OutageFor: 5 * time.Second})
	}
	return ts
}

func run(ctx context.Context, cfg config, argv []string) error {
	if cfg.Rate <= 0 || cfg.Duration < time.Second || cfg.Users <= 0 {
		return fmt.Errorf("loadtest: -rate %d, -duration %v, -users %d: want a rate > 0, at least 1s and users > 0", cfg.Rate, cfg.Duration, cfg.Users)
	}
	var only *regexp.Regexp
	if cfg.Only != "" {
		var err error
		if only, err = regexp.Compile(cfg.Only); err != nil {
			return fmt.Errorf("loadtest: -only: %w", err)
		}
	}
	var plan []target
	for _, t := range targets(cfg.Outage, cfg.Peak) {
		if t.Outage && t.OutageAt+t.OutageFor+5*time.Second > cfg.Duration {
			return fmt.Errorf("loadtest: -duration %v is too short for the outage run (killed at %v for %v): want at least %v, or -outage=false", cfg.Duration, t.OutageAt, t.OutageFor, t.OutageAt+t.OutageFor+5*time.Second)
		}
		if only == nil || only.MatchString(t.Name()) {
			plan = append(plan, t)
		}
	}
	if len(plan) == 0 {
		return fmt.Errorf("loadtest: -only %q matches no target", cfg.Only)
	}
	root := cfg.Root
	if root == "" {
		out, err := exec.CommandContext(ctx, "go", "env", "GOWORK").Output()
		if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == "off" {
			return fmt.Errorf("loadtest: run it inside the workspace (go env GOWORK: %q, %v), or give -root", strings.TrimSpace(string(out)), err)
		}
		root = filepath.Dir(strings.TrimSpace(string(out)))
	}
	if err := checkLoopback(ctx); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "loadtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	start := time.Now()
	log.Printf("building the example servers")
	frameworks := map[string]bool{}
	var fws []string
	for _, t := range plan {
		if !frameworks[t.Framework] {
			frameworks[t.Framework] = true
			fws = append(fws, t.Framework)
		}
	}
	bins, err := build(ctx, root, dir, fws)
	if err != nil {
		return err
	}
	e := &env{bins: bins, rate: cfg.Rate, duration: cfg.Duration, users: cfg.Users, seed: cfg.Seed, logf: log.Printf}
	e.rules = filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(e.rules, []byte(rulesYAML()), 0o600); err != nil {
		return err
	}
	needs := func(store string) bool {
		for _, t := range plan {
			if t.Store == store {
				return true
			}
		}
		return false
	}
	if needs("redis") {
		srv, stopRedis, err := redistest.StartStandalone()
		if err != nil {
			return err
		}
		defer stopRedis()
		e.standalone = srv
	}
	if needs("cluster") {
		cl, stopCluster, err := redistest.StartCluster()
		if err != nil {
			return err
		}
		defer stopCluster()
		e.cluster = cl
	}

	rep := &report{Config: cfg, Argv: argv, Started: start, Bins: bins}
	var failed []string
	for _, t := range plan {
		if err := ctx.Err(); err != nil {
			return err
		}
		load0 := loadAvg()
		res, err := e.run(ctx, t)
		if err != nil {
			return fmt.Errorf("%s: %w", t.Name(), err)
		}
		s, err := summarize(res, cfg.Users)
		if err != nil {
			return err
		}
		s.Load = [2]string{load0, loadAvg()}
		rep.Runs = append(rep.Runs, s)
		if s.Over > 0 && !t.Outage {
			failed = append(failed, fmt.Sprintf("%s: %d buckets admitted %d requests beyond the exact math", t.Name(), s.OverBuckets, s.Over))
		}
		if s.Failed*100 > s.Requests && !t.Outage {
			failed = append(failed, fmt.Sprintf("%s: %d of %d requests failed (%s)", t.Name(), s.Failed, s.Requests, strings.Join(s.FirstFailures, ", ")))
		}
		if s.Degraded > 0 && !t.Outage {
			failed = append(failed, fmt.Sprintf("%s: %.0f decisions failed open (the store did not answer within %v)", t.Name(), s.Degraded, t.timeout()))
		}
		if s.OutageErr != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", t.Name(), s.OutageErr))
		}
	}
	rep.Took = time.Since(start)
	rep.Failures = failed
	if cfg.Out != "" {
		if err := rep.write(cfg.Out, cfg.Plots); err != nil {
			return err
		}
		log.Printf("wrote %s", cfg.Out)
	}
	rep.printSummary(os.Stdout)
	if len(failed) > 0 {
		return fmt.Errorf("%w:\n  %s", errFailed, strings.Join(failed, "\n  "))
	}
	return nil
}

// loadAvg returns the 1-minute load average, from /proc/loadavg, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
