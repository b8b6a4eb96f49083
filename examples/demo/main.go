// Command demo runs two timelines through a real net/http server with the
// nethttp middleware, and prints what a client receives: statuses, the
// rate-limit header fields and the 429 problem bodies.
//
//	(a) the seed timeline: a token bucket of capacity 4 refilling 2 per
//	    second, starting full;
//	(b) multi-tier plans: a free and a pro user on shared endpoints, limited
//	    per user (by plan), per endpoint and globally.
//
// The server listens on a loopback port and a real http.Client sends the
// requests. Its limiter keeps buckets in the in-memory store, whose clock
// the demo moves to each request's instant (core.ManualClock) instead of
// sleeping: the output is the same on every run and takes milliseconds.
//
// Run it from the repository root with
//
//	go run ./examples/demo
package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

func main() {
	// Every request takes milliseconds; the deadline only bounds a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		cancel()
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// t0 is the first named instant of both timelines. Every request is decided
// at t0 plus its offset, so the output is the same on every run.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func run(ctx context.Context, w io.Writer) error {
	seed, err := runSeed(ctx)
	if err != nil {
		return err
	}
	printSeed(w, seed)
	fmt.Fprintln(w)
	plans, err := runPlans(ctx)
	if err != nil {
		return err
	}
	printPlans(w, plans)
	return nil
}

// The server.

// server is a net/http server on a loopback port whose routes are limited
// by the nethttp middleware. The user is the X-User header field and the
// plan the X-Plan field; the limiter's memory store reads clock.
type server struct {
	url    string
	clock  *core.ManualClock
	srv    *http.Server
	client *http.Client

	mu   sync.Mutex
	last Tier // the deciding tier of the latest decision
}

// Tier is the deciding tier of a decision, as the server saw it: the
// denying tier, or the one with the fewest tokens left.
type Tier struct {
	Rule       string
	Scope      core.Scope
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration // the exact wait, when denied
}

// startServer starts a server whose limiter has rules, serving routes
// (ServeMux patterns) that answer "ok".
func startServer(rules []core.Rule, routes ...string) (*server, error) {
	s := &server{clock: core.NewManualClock(t0)}
	store, err := core.NewMemoryStore(core.WithClock(s.clock))
	if err != nil {
		return nil, err
	}
	// With plans, a request of no plan, or of a plan no rule names, gets
	// the free plan's tiers.
	var plans core.Plans
	if slices.ContainsFunc(rules, func(r core.Rule) bool { return r.Plan != "" }) {
		plans.Default = "free"
	}
	policy, err := core.NewPlanPolicy(plans, rules...)
	if err != nil {
		return nil, err
	}
	limiter, err := core.NewLimiter(policy, core.WithStore(store), core.WithObserver(s.observe))
	if err != nil {
		return nil, err
	}
	user, err := keyfuncs.Header("X-User")
	if err != nil {
		return nil, err
	}
	plan, err := keyfuncs.Header("X-Plan")
	if err != nil {
		return nil, err
	}
	rl, err := nethttp.New(limiter, flow.WithKey(core.ScopeUser, user), flow.WithPlan(plan))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for _, route := range routes {
		mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok\n")
		})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.url = "http://" + ln.Addr().String()
	s.srv = &http.Server{Handler: rl.Handler(mux), ReadHeaderTimeout: 5 * time.Second}
	s.client = &http.Client{}
	go s.srv.Serve(ln)
	return s, nil
}

// observe records the deciding tier of each decision (core.WithObserver).
func (s *server) observe(_ context.Context, e *core.Event) {
	d := e.Decision
	s.mu.Lock()
	s.last = Tier{Rule: d.Rule, Scope: d.Scope, Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter}
	s.mu.Unlock()
}

// close stops the server.
func (s *server) close() {
	s.client.CloseIdleConnections()
	s.srv.Close()
}

// Response is what the client received for one request, and the tier that
// decided it on the server.
type Response struct {
	Status int
	Header http.Header // every field but Date
	Body   string
	Tier   Tier
}

// send sets the clock to t0+at and sends GET path with the X-User and
// X-Plan fields (when not empty). Requests are sent one at a time.
func (s *server) send(ctx context.Context, at time.Duration, path, user, plan string) (Response, error) {
	s.clock.Set(t0.Add(at))
	req, err := http.NewRequestWithContext(ctx, "GET", s.url+path, nil)
	if err != nil {
		return Response{}, err
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	if plan != "" {
		req.Header.Set("X-Plan", plan)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, err
	}
	resp.Header.Del("Date") // the only field that changes from run to run
	s.mu.Lock()
	tier := s.last
	s.mu.Unlock()
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: string(body), Tier: tier}, nil
}

// (a) The seed timeline.

// seedRule is the bucket of the seed notes: capacity 4, 2 tokens a second.
var seedRule = core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(2), 4)}

// seedTimes are the instants of the nine requests, after t0.
var seedTimes = []time.Duration{
	0, 0, 0, 0,
	500 * time.Millisecond,
	time.Second,
	2 * time.Second, 2 * time.Second, 2 * time.Second,
}

// SeedResult is the outcome of one request of the seed timeline, as the
// client received it, and the exact wait the server computed.
type SeedResult struct {
	At         time.Duration // after t0
	Status     int           // 200, or 429 when denied
	Remaining  string        // X-RateLimit-Remaining
	RateLimit  string        // RateLimit: the tier, tokens left (r) and seconds to wait or refill (t)
	RetryAfter string        // Retry-After, when denied: whole seconds, rounded up
	Wait       time.Duration // when denied: the exact wait until a token is back
	Policy     string        // RateLimit-Policy: the quota (q) and the seconds to refill it (w)
}

func runSeed(ctx context.Context) ([]SeedResult, error) {
	s, err := startServer([]core.Rule{seedRule}, "GET /items")
	if err != nil {
		return nil, err
	}
	defer s.close()
	out := make([]SeedResult, 0, len(seedTimes))
	for _, at := range seedTimes {
		resp, err := s.send(ctx, at, "/items", "alice", "")
		if err != nil {
			return nil, err
		}
		r := SeedResult{
			At: at, Status: resp.Status,
			Remaining:  resp.Header.Get("X-RateLimit-Remaining"),
			RateLimit:  resp.Header.Get("RateLimit"),
			RetryAfter: resp.Header.Get("Retry-After"),
			Policy:     resp.Header.Get("RateLimit-Policy"),
		}
		if resp.Status != http.StatusOK {
			r.Wait = resp.Tier.RetryAfter
		}
		out = append(out, r)
	}
	return out, nil
}

func printSeed(w io.Writer, rs []SeedResult) {
	fmt.Fprintln(w, "(a) Seed timeline: token bucket, capacity 4, refill 2/s, starting full")
	fmt.Fprintln(w, "    alice sends GET /items to a net/http server with the nethttp middleware")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  time\t#\tstatus\tX-RateLimit-Remaining\tRateLimit\tRetry-After\texact wait")
	for i, r := range rs {
		retry, wait := "-", "-"
		if r.Status != http.StatusOK {
			retry, wait = r.RetryAfter, r.Wait.String()
		}
		fmt.Fprintf(tw, "  t=%.1fs\t%d\t%d %s\t%s\t%s\t%s\t%s\n", r.At.Seconds(), i+1, r.Status, http.StatusText(r.Status), r.Remaining, r.RateLimit, retry, wait)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(rs) > 0 {
		fmt.Fprintf(w, "  Every response also carries RateLimit-Policy: %s (q: the quota, w: seconds to refill it).\n", rs[0].Policy)
	}
	fmt.Fprintln(w, "  Retry-After rounds the exact wait up to whole seconds: never earlier than the token.")
}

// (b) Multi-tier plans.

// planRules: per-user limits by plan (two rules named per-user, on distinct
// plans), then per-endpoint and global limits for everyone.
var planRules = []core.Rule{
	{Name: "per-user", Scope: core.ScopeUser, Plan: "free", Limit: core.TokenBucket(core.PerSecond(1), 3)},
	{Name: "per-user", Scope: core.ScopeUser, Plan: "pro", Limit: core.TokenBucket(core.PerSecond(10), 20)},
	{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerSecond(5), 8)},
	{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(20), 10)},
}

// PlanStep is one request of the multi-tier timeline.
type PlanStep struct {
	At   time.Duration // after t0
	User string
	Plan string
	Path string
}

func repeat(n int, s PlanStep) []PlanStep {
	out := make([]PlanStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// planSteps: alice (free) runs out of her own quota first; bob (pro) has
// plenty of his, but empties the endpoint's and then the global bucket;
// alice's retry after her Retry-After succeeds.
var planSteps = slices.Concat(
	repeat(4, PlanStep{0, "alice", "free", "/search"}),
	repeat(6, PlanStep{0, "bob", "pro", "/search"}),
	repeat(3, PlanStep{0, "bob", "pro", "/items"}),
	[]PlanStep{{time.Second, "alice", "free", "/search"}},
)

// PlanResult is one request of the multi-tier timeline and the response.
type PlanResult struct {
	PlanStep
	Response
}

func runPlans(ctx context.Context) ([]PlanResult, error) {
	s, err := startServer(planRules, "GET /search", "GET /items")
	if err != nil {
		return nil, err
	}
	defer s.close()
	out := make([]PlanResult, 0, len(planSteps))
	for _, step := range planSteps {
		resp, err := s.send(ctx, step.At, step.Path, step.User, step.Plan)
		if err != nil {
			return nil, err
		}
		out = append(out, PlanResult{step, resp})
	}
	return out, nil
}

func printPlans(w io.Writer, rs []PlanResult) {
	printPlanTable(w, rs)
	fmt.Fprintln(w)
	printResponses(w, rs)
}

// printPlanTable prints the rules and one line per request of rs.
func printPlanTable(w io.Writer, rs []PlanResult) {
	fmt.Fprintln(w, "(b) Multi-tier plans: a free and a pro user, per-user, per-endpoint and global tiers")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  rule\tscope\tplan\tlimit")
	for _, r := range planRules {
		plan := r.Plan
		if plan == "" {
			plan = "every plan"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%v\n", r.Name, r.Scope, plan, r.Limit)
	}
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\ttime\tuser\tplan\trequest\tstatus\tdeciding tier\tleft\tretry after")
	for i, r := range rs {
		retry := "-"
		if r.Status != http.StatusOK {
			retry = fmt.Sprintf("%v (Retry-After: %s)", r.Tier.RetryAfter, r.Header.Get("Retry-After"))
		}
		fmt.Fprintf(tw, "  %d\tt=%gs\t%s\t%s\tGET %s\t%d %s\t%s (%s)\t%d of %d\t%s\n",
			i+1, r.At.Seconds(), r.User, r.Plan, r.Path, r.Status, http.StatusText(r.Status), r.Tier.Rule, r.Tier.Scope, r.Tier.Remaining, r.Tier.Limit, retry)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  The deciding tier is the one that denied or, when allowed, the one with the fewest tokens left.")
	fmt.Fprintln(w, "  A request denied by one tier takes nothing from the others.")
}

// printResponses prints each response of rs as the client received it.
func printResponses(w io.Writer, rs []PlanResult) {
	fmt.Fprintln(w, "  The responses, as the client received them (all fields but Date):")
	for i, r := range rs {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  #%d  t=%gs  GET %s  X-User: %s  X-Plan: %s\n", i+1, r.At.Seconds(), r.Path, r.User, r.Plan)
		fmt.Fprintf(w, "      HTTP/1.1 %d %s\n", r.Status, http.StatusText(r.Status))
		for _, name := range slices.Sorted(maps.Keys(r.Header)) {
			for _, v := range r.Header[name] {
				fmt.Fprintf(w, "      %s: %s\n", name, v)
			}
		}
		fmt.Fprintln(w)
		fmt.Fprintf(w, "      %s\n", strings.TrimSuffix(r.Body, "\n"))
	}
}
