package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/bucketry/ratelimit/internal/redistest"
)

// A target is one configuration the load test drives: a framework's example
// server on a store, as Instances processes behind one load balancer.
type target struct {
	Framework string // "gin" or "nethttp"
	Store     string // "none" (the baseline, without the middleware), "memory", "redis", "cluster"
	Client    string // "go-redis" or "rueidis" on Redis
	Instances int
	// Outage kills the standalone redis-server at OutageAt into the run
	// and restarts it OutageFor later.
	Outage              bool
	OutageAt, OutageFor time.Duration
	// Rate and Duration, when not zero, replace the run's -rate and
	// -duration: the peak runs.
	Rate     int
	Duration time.Duration
}

// Name is the target's name in the report: "gin redis/go-redis".
func (t target) Name() string {
	s := t.Framework + " " + t.Store
	if t.Client != "" {
		s += "/" + t.Client
	}
	if t.Outage {
		s += " outage"
	}
	if t.Rate != 0 {
		s += fmt.Sprintf(" @%d/s", t.Rate)
	}
	return s
}

// timeout is the servers' -redis-timeout. The outage run has the
// examples' default, 100ms, past which a decision fails open: the outage
// costs at most that. The other runs measure exactness, so they give Redis
// a second: a decision that still takes longer fails open, and the run
// reports it (Degraded) and fails.
func (t target) timeout() time.Duration {
	if t.Outage {
		return 100 * time.Millisecond
	}
	return time.Second
}

// limited reports whether the target runs the middleware.
func (t target) limited() bool { return t.Store != "none" }

// env is what every run shares: the binaries, the rules file and the Redis
// deployments.
type env struct {
	bins       map[string]string
	rules      string
	standalone *redistest.Server
	cluster    *redistest.ClusterServer
	rate       int
	duration   time.Duration
	users      int
	seed       uint64
	logf       func(format string, args ...any)
}

// servers returns the redis-servers of the target's store.
func (e *env) servers(t target) []*redistest.Server {
	switch t.Store {
	case "redis":
		return []*redistest.Server{e.standalone}
	case "cluster":
		return e.cluster.Masters
	}
	return nil
}

// args returns the command-line flags of the target's servers.
func (e *env) args(t target) []string {
	if !t.limited() {
		return []string{"-no-limit"}
	}
	args := []string{"-rules", e.rules, "-metrics", "127.0.0.1:0"}
	switch t.Store {
	case "redis":
		args = append(args, "-redis", e.standalone.Addr)
	case "cluster":
		args = append(args, "-redis-cluster", strings.Join(e.cluster.Addrs(), ","))
	}
	if t.Client != "" {
		args = append(args, "-redis-client", t.Client, "-redis-timeout", t.timeout().String())
	}
	return args
}

// A sample is one request's outcome, as the checks need it.
type sample struct {
	at      time.Duration // when it was sent, from the start of the attack
	latency time.Duration
	code    uint16
	failed  bool // a transport error, a timeout, or a status other than 200 and 429
	url     string
}

// A result is one run's measurements.
type result struct {
	Target    target
	Began     time.Time
	Elapsed   time.Duration // from the start of the attack to the end of its last response
	Samples   []sample
	Redis     redisStats // the run's deltas, summed over the servers
	AppCPU    time.Duration
	Metrics   map[string]float64 // the instances' rate_limiter_ samples, summed
	Outage    [2]time.Duration   // when the server was killed and when it answered again
	OutageErr error
}

// counted paces an attack as its Pacer does and stops it after n
// requests. An attack bounded by its duration instead sends fewer when the
// machine falls behind its pace; this one catches up and sends them all,
// ending a little later.
type counted struct {
	vegeta.Pacer
	n uint64
}

// Pace implements vegeta.Pacer.
func (c counted) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if hits >= c.n {
		return 0, true
	}
	return c.Pacer.Pace(elapsed, hits)
}

// run drives one target: it empties the store, starts the instances,
// sends them requests at e.rate for e.duration (or the target's own),
// rate x duration in all however late (see counted), and collects what it
// measured.
func (e *env) run(ctx context.Context, t target) (*result, error) {
	servers := e.servers(t)
	if err := flush(servers); err != nil {
		return nil, err
	}
	ins := make([]*instance, 0, t.Instances)
	defer func() { stopAll(ins) }()
	for range t.Instances {
		in, err := startInstance(e.bins[t.Framework], e.args(t)...)
		if err != nil {
			return nil, err
		}
		ins = append(ins, in)
	}
	bases := make([]string, len(ins))
	for i, in := range ins {
		bases[i] = "http://" + in.addr
	}
	w := &workload{bases: bases, users: e.users, seed: e.seed}
	before, err := readRedis(servers)
	if err != nil {
		return nil, err
	}
	cpu0 := appCPU(ins)

	const timeout = 5 * time.Second
	hc := client(timeout)
	defer hc.CloseIdleConnections()
	atk := vegeta.NewAttacker(vegeta.Client(hc), vegeta.MaxBody(0), vegeta.Timeout(timeout))
	res := &result{Target: t, Began: time.Now()}
	if t.Outage {
		stop := make(chan struct{})
		outage := make(chan error, 1)
		go func() { outage <- e.outage(stop, res, t) }()
		defer func() {
			close(stop)
			res.OutageErr = <-outage
		}()
	}
	rate, duration := e.rate, e.duration
	if t.Rate != 0 {
		rate, duration = t.Rate, t.Duration
	}
	n := uint64(float64(rate) * duration.Seconds())
	pace := counted{Pacer: vegeta.Rate{Freq: rate, Per: time.Second}, n: n}
	res.Samples = make([]sample, 0, n)
	var last time.Duration
	for r := range atk.Attack(w.targeter(), pace, 0, t.Name()) {
		s := sample{
			at:      r.Timestamp.Sub(res.Began),
			latency: r.Latency,
			code:    r.Code,
			url:     r.URL,
		}
		s.failed = r.Code != http.StatusOK && r.Code != http.StatusTooManyRequests
		if end := s.at + s.latency; end > last {
			last = end
		}
		res.Samples = append(res.Samples, s)
	}
	// The attack's clock starts just before the first request, and every
	// response has ended by last: the exact math's interval holds them all.
	res.Elapsed = last
	res.AppCPU = appCPU(ins) - cpu0
	after, err := readRedis(servers)
	if err != nil {
		return nil, err
	}
	res.Redis = redisStats{cpu: after.cpu - before.cpu, commands: after.commands - before.commands - int64(len(servers)), scripts: after.scripts - before.scripts}
	if t.limited() {
		res.Metrics = make(map[string]float64)
		for _, in := range ins {
			m, err := in.scrape(ctx, "rate_limiter_")
			if err != nil {
				return nil, err
			}
			for k, v := range m {
				res.Metrics[k] += v
			}
		}
	}
	if err := stopAll(ins); err != nil {
		return nil, err
	}
	ins = nil
	e.logf("%-28s %6d requests in %v", t.Name(), len(res.Samples), res.Elapsed.Round(time.Millisecond))
	for k, v := range res.Metrics {
		if strings.HasPrefix(k, "rate_limiter_errors_total{") && v > 0 {
			e.logf("%-28s %s %.0f", t.Name(), k, v)
		}
	}
	return res, nil
}

// outage kills the standalone server OutageAt into the run and restarts it
// OutageFor later, recording both times in res.
func (e *env) outage(stop <-chan struct{}, res *result, t target) error {
	wait := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(time.Until(res.Began.Add(d))):
			return true
		}
	}
	if !wait(t.OutageAt) {
		return fmt.Errorf("loadtest: the run ended before the outage at %v", t.OutageAt)
	}
	res.Outage[0] = time.Since(res.Began)
	e.standalone.Kill()
	if !wait(t.OutageAt + t.OutageFor) {
		return fmt.Errorf("loadtest: the run ended during the outage")
	}
	if err := e.standalone.RestartErr(); err != nil {
		return fmt.Errorf("loadtest: restarting redis-server: %w", err)
	}
	res.Outage[1] = time.Since(res.Began)
	return nil
}

// appCPU returns the CPU time the instances have used, or 0 where /proc
// cannot tell.
func appCPU(ins []*instance) time.Duration {
	var sum time.Duration
	for _, in := range ins {
		d, _ := in.cpu()
		sum += d
	}
	return sum
}
