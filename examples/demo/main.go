// Command demo shows the limiter deciding two timelines on the in-memory
// store, at explicit instants (no sleeping):
//
//	(a) the seed timeline: a token bucket of capacity 4 refilling 2 per
//	    second, starting full;
//	(b) multi-tier plans: a free and a pro user on shared endpoints, limited
//	    per user (by plan), per endpoint and globally, with the exact headers
//	    and 429 bodies a client receives.
//
// Run it from the repository root with
//
//	go run ./examples/demo
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bucketry/ratelimit/core"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// t0 is the first named instant of both timelines. Every request is decided
// at t0 plus its offset, so the output is the same on every run.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func run(w io.Writer) error {
	seed, err := runSeed()
	if err != nil {
		return err
	}
	printSeed(w, seed)
	fmt.Fprintln(w)
	plans, err := runPlans()
	if err != nil {
		return err
	}
	printPlans(w, plans)
	return nil
}

// newLimiter returns a limiter on a new in-memory store.
func newLimiter(rules ...core.Rule) (*core.Limiter, error) {
	p, err := core.NewPolicy(rules...)
	if err != nil {
		return nil, err
	}
	return core.NewLimiter(p)
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

// SeedResult is the outcome of one request of the seed timeline.
type SeedResult struct {
	At         time.Duration // after t0
	Allowed    bool
	Remaining  int64
	RetryAfter time.Duration // when denied
}

func runSeed() ([]SeedResult, error) {
	l, err := newLimiter(seedRule)
	if err != nil {
		return nil, err
	}
	req := core.Request{User: "alice"}
	out := make([]SeedResult, 0, len(seedTimes))
	for _, at := range seedTimes {
		d, err := l.AllowAt(context.Background(), t0.Add(at), req, 1)
		if err != nil {
			return nil, err
		}
		out = append(out, SeedResult{At: at, Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter})
	}
	return out, nil
}

func printSeed(w io.Writer, rs []SeedResult) {
	fmt.Fprintln(w, "(a) Seed timeline: token bucket, capacity 4, refill 2/s, starting full")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  time\trequest\toutcome\tremaining\tretry after")
	for i, r := range rs {
		outcome, retry := "allowed", "-"
		if !r.Allowed {
			outcome, retry = "DENIED", r.RetryAfter.String()
		}
		fmt.Fprintf(tw, "  t=%.1fs\t#%d\t%s\t%d\t%s\n", r.At.Seconds(), i+1, outcome, r.Remaining, retry)
	}
	tw.Flush()
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
	At       time.Duration // after t0
	User     string
	Plan     string
	Endpoint string
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
var planSteps = concat(
	repeat(4, PlanStep{0, "alice", "free", "GET /search"}),
	repeat(6, PlanStep{0, "bob", "pro", "GET /search"}),
	repeat(3, PlanStep{0, "bob", "pro", "GET /items"}),
	[]PlanStep{{time.Second, "alice", "free", "GET /search"}},
)

func concat(ss ...[]PlanStep) []PlanStep {
	var out []PlanStep
	for _, s := range ss {
		out = append(out, s...)
	}
	return out
}

// Header is one response header field.
type Header struct{ Name, Value string }

// PlanResult is the outcome of one request of the multi-tier timeline and
// the response a client would receive.
type PlanResult struct {
	PlanStep
	Allowed    bool
	Rule       string        // the deciding tier: the denying one, or the one with least remaining
	Scope      core.Scope    // the deciding tier's scope
	Limit      int64         // the deciding tier's burst
	Remaining  int64         // the deciding tier's whole tokens left
	RetryAfter time.Duration // when denied: the exact wait
	Status     int           // 200, or 429 when denied
	Headers    []Header      // in the order the HeaderFormat set them
	Body       string        // the problem body of a denial
}

func runPlans() ([]PlanResult, error) {
	l, err := newLimiter(planRules...)
	if err != nil {
		return nil, err
	}
	f, err := core.NewHeaderFormat()
	if err != nil {
		return nil, err
	}
	out := make([]PlanResult, 0, len(planSteps))
	for _, s := range planSteps {
		now := t0.Add(s.At)
		req := core.Request{Plan: s.Plan, User: s.User, Endpoint: s.Endpoint}
		d, err := l.AllowAt(context.Background(), now, req, 1)
		if err != nil {
			return nil, err
		}
		r := PlanResult{
			PlanStep: s, Allowed: d.Allowed, Rule: d.Rule, Scope: d.Scope,
			Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter, Status: 200,
		}
		f.Headers(&d, func(name, value string) { r.Headers = append(r.Headers, Header{name, value}) })
		if status := f.Status(&d); status != 0 {
			r.Status = status
			r.Headers = append(r.Headers, Header{"Content-Type", core.ContentTypeProblem})
			r.Body = string(f.AppendProblem(nil, &d))
		}
		out = append(out, r)
	}
	return out, nil
}

var statusText = map[int]string{200: "OK", 429: "Too Many Requests", 503: "Service Unavailable"}

func printPlans(w io.Writer, rs []PlanResult) {
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
	fmt.Fprintln(tw, "  #\ttime\tuser\tplan\trequest\tstatus\toutcome\tdeciding tier\tleft\tretry after")
	for i, r := range rs {
		outcome, retry := "allowed", "-"
		if !r.Allowed {
			outcome = "DENIED"
			retry = fmt.Sprintf("%v (Retry-After: %s)", r.RetryAfter, header(r.Headers, "Retry-After"))
		}
		fmt.Fprintf(tw, "  %d\tt=%gs\t%s\t%s\t%s\t%d\t%s\t%s (%s)\t%d of %d\t%s\n",
			i+1, r.At.Seconds(), r.User, r.Plan, r.Endpoint, r.Status, outcome, r.Rule, r.Scope, r.Remaining, r.Limit, retry)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  The deciding tier is the one that denied or, when allowed, the one with the fewest tokens left.")
	fmt.Fprintln(w)

	fmt.Fprintln(w, "  The responses, as a client receives them:")
	for i, r := range rs {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "  #%d  t=%gs  %s (%s)  %s\n", i+1, r.At.Seconds(), r.User, r.Plan, r.Endpoint)
		fmt.Fprintf(w, "      HTTP/1.1 %d %s\n", r.Status, statusText[r.Status])
		for _, h := range r.Headers {
			fmt.Fprintf(w, "      %s: %s\n", h.Name, h.Value)
		}
		if r.Body != "" {
			fmt.Fprintln(w)
			fmt.Fprintf(w, "      %s\n", r.Body)
		}
	}
}

// header returns the value of the named field, or "".
func header(hs []Header, name string) string {
	for _, h := range hs {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return ""
}
