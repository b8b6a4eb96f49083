package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSeed: the corrected seed timeline, as the client receives it. t=0
// four pass; t=0.5 one passes; t=1 one passes; t=2 two of three pass and
// the third must wait 500ms, which Retry-After rounds up to 1 second.
func TestSeed(t *testing.T) {
	const ms = time.Millisecond
	const policy = `"per-user";q=4;w=2`
	ok := func(at time.Duration, remaining, ratelimit string) SeedResult {
		return SeedResult{At: at, Status: 200, Remaining: remaining, RateLimit: ratelimit, Policy: policy}
	}
	want := []SeedResult{
		ok(0, "3", `"per-user";r=3;t=1`),
		ok(0, "2", `"per-user";r=2;t=1`),
		ok(0, "1", `"per-user";r=1;t=2`),
		ok(0, "0", `"per-user";r=0;t=2`),
		ok(500*ms, "0", `"per-user";r=0;t=2`),
		ok(1000*ms, "0", `"per-user";r=0;t=2`),
		ok(2000*ms, "1", `"per-user";r=1;t=2`),
		ok(2000*ms, "0", `"per-user";r=0;t=2`),
		{At: 2000 * ms, Status: 429, Remaining: "0", RateLimit: `"per-user";r=0;t=1`, RetryAfter: "1", Wait: 500 * ms, Policy: policy},
	}
	got, err := runSeed(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("runSeed: %d results, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request #%d at t0+%v = %+v, want %+v", i+1, want[i].At, got[i], want[i])
		}
	}
}

// TestPlans: the free user is denied by per-user first, the pro user by
// per-endpoint and then by global, and the free user's retry after her
// Retry-After passes.
func TestPlans(t *testing.T) {
	type outcome struct {
		user, path string
		status     int
		rule       string // the deciding tier
	}
	ok := func(user, path, rule string) outcome { return outcome{user, path, 200, rule} }
	denied := func(user, path, rule string) outcome { return outcome{user, path, 429, rule} }
	want := []outcome{
		ok("alice", "/search", "per-user"),
		ok("alice", "/search", "per-user"),
		ok("alice", "/search", "per-user"),
		denied("alice", "/search", "per-user"),
		ok("bob", "/search", "per-endpoint"),
		ok("bob", "/search", "per-endpoint"),
		ok("bob", "/search", "per-endpoint"),
		ok("bob", "/search", "per-endpoint"),
		ok("bob", "/search", "per-endpoint"),
		denied("bob", "/search", "per-endpoint"),
		ok("bob", "/items", "global"),
		ok("bob", "/items", "global"),
		denied("bob", "/items", "global"),
		ok("alice", "/search", "per-user"),
	}
	got, err := runPlans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("runPlans: %d results, want %d", len(got), len(want))
	}
	for i, r := range got {
		g := outcome{r.User, r.Path, r.Status, r.Tier.Rule}
		if g != want[i] {
			t.Errorf("request #%d = %+v, want %+v", i+1, g, want[i])
			continue
		}
		checkResponse(t, i+1, r)
	}
	// Alice's retry happens exactly when her Retry-After says she may.
	retry, err := strconv.Atoi(got[3].Header.Get("Retry-After"))
	if err != nil || time.Duration(retry)*time.Second != got[13].At-got[3].At {
		t.Errorf("alice retries at t0+%v, want after Retry-After %q of request #4", got[13].At, got[3].Header.Get("Retry-After"))
	}
}

// checkResponse checks the header fields and body the client received for
// r against the server's decision.
func checkResponse(t *testing.T, n int, r PlanResult) {
	t.Helper()
	if got, want := r.Header.Get("X-RateLimit-Remaining"), strconv.FormatInt(r.Tier.Remaining, 10); got != want {
		t.Errorf("#%d: X-RateLimit-Remaining = %q, want %q", n, got, want)
	}
	if got, want := r.Header.Get("X-RateLimit-Limit"), strconv.FormatInt(r.Tier.Limit, 10); got != want {
		t.Errorf("#%d: X-RateLimit-Limit = %q, want %q", n, got, want)
	}
	policy := r.Header.Get("RateLimit-Policy")
	for _, tier := range []string{`"per-user";q=`, `"per-endpoint";q=8;w=2`, `"global";q=10;w=1`} {
		if !strings.Contains(policy, tier) {
			t.Errorf("#%d: RateLimit-Policy %s lacks %s", n, policy, tier)
		}
	}
	if want := `"` + r.Tier.Rule + `";r=`; !strings.HasPrefix(r.Header.Get("RateLimit"), want) {
		t.Errorf("#%d: RateLimit = %s, want the deciding tier %s", n, r.Header.Get("RateLimit"), r.Tier.Rule)
	}
	if r.Status == http.StatusOK {
		if r.Body != "ok\n" || r.Header.Get("Retry-After") != "" {
			t.Errorf("#%d: allowed request has body %q, Retry-After %q", n, r.Body, r.Header.Get("Retry-After"))
		}
		return
	}
	retry, err := strconv.Atoi(r.Header.Get("Retry-After"))
	if err != nil || retry < 1 || time.Duration(retry)*time.Second < r.Tier.RetryAfter || time.Duration(retry-1)*time.Second >= r.Tier.RetryAfter {
		t.Errorf("#%d: Retry-After %q for a wait of %v, want it rounded up to whole seconds", n, r.Header.Get("Retry-After"), r.Tier.RetryAfter)
	}
	if got := r.Header.Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("#%d: Content-Type = %q", n, got)
	}
	if got := r.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("#%d: Cache-Control = %q", n, got)
	}
	var body struct {
		Type             string   `json:"type"`
		Status           int      `json:"status"`
		ViolatedPolicies []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatalf("#%d: body %s: %v", n, r.Body, err)
	}
	if body.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" || body.Status != 429 ||
		len(body.ViolatedPolicies) != 1 || body.ViolatedPolicies[0] != r.Tier.Rule {
		t.Errorf("#%d: body = %+v, want quota-exceeded, 429, violated-policies [%s]", n, body, r.Tier.Rule)
	}
}

func TestRun(t *testing.T) {
	var buf bytes.Buffer
	if err := run(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"(a) Seed timeline",
		"(b) Multi-tier plans",
		"HTTP/1.1 429 Too Many Requests",
		`"violated-policies":["per-endpoint"]`,
		`"violated-policies":["global"]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for i, line := range strings.Split(out, "\n") {
		if strings.TrimRight(line, " ") != line {
			t.Errorf("line %d has trailing spaces: %q", i+1, line)
		}
	}
}

func Example_seedTimeline() {
	rs, err := runSeed(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	printSeed(os.Stdout, rs)
	// Output:
	// (a) Seed timeline: token bucket, capacity 4, refill 2/s, starting full
	//     alice sends GET /items to a net/http server with the nethttp middleware
	//
	//   time    #  status                 X-RateLimit-Remaining  RateLimit           Retry-After  exact wait
	//   t=0.0s  1  200 OK                 3                      "per-user";r=3;t=1  -            -
	//   t=0.0s  2  200 OK                 2                      "per-user";r=2;t=1  -            -
	//   t=0.0s  3  200 OK                 1                      "per-user";r=1;t=2  -            -
	//   t=0.0s  4  200 OK                 0                      "per-user";r=0;t=2  -            -
	//   t=0.5s  5  200 OK                 0                      "per-user";r=0;t=2  -            -
	//   t=1.0s  6  200 OK                 0                      "per-user";r=0;t=2  -            -
	//   t=2.0s  7  200 OK                 1                      "per-user";r=1;t=2  -            -
	//   t=2.0s  8  200 OK                 0                      "per-user";r=0;t=2  -            -
	//   t=2.0s  9  429 Too Many Requests  0                      "per-user";r=0;t=1  1            500ms
	//
	//   Every response also carries RateLimit-Policy: "per-user";q=4;w=2 (q: the quota, w: seconds to refill it).
	//   Retry-After rounds the exact wait up to whole seconds: never earlier than the token.
}

func Example_multiTier() {
	rs, err := runPlans(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	printPlanTable(os.Stdout, rs)
	// Output:
	// (b) Multi-tier plans: a free and a pro user, per-user, per-endpoint and global tiers
	//
	//   rule          scope     plan        limit
	//   per-user      user      free        token_bucket 1/1s burst 3
	//   per-user      user      pro         token_bucket 10/1s burst 20
	//   per-endpoint  endpoint  every plan  token_bucket 5/1s burst 8
	//   global        global    every plan  token_bucket 20/1s burst 10
	//
	//   #   time  user   plan  request      status                 deciding tier            left     retry after
	//   1   t=0s  alice  free  GET /search  200 OK                 per-user (user)          2 of 3   -
	//   2   t=0s  alice  free  GET /search  200 OK                 per-user (user)          1 of 3   -
	//   3   t=0s  alice  free  GET /search  200 OK                 per-user (user)          0 of 3   -
	//   4   t=0s  alice  free  GET /search  429 Too Many Requests  per-user (user)          0 of 3   1s (Retry-After: 1)
	//   5   t=0s  bob    pro   GET /search  200 OK                 per-endpoint (endpoint)  4 of 8   -
	//   6   t=0s  bob    pro   GET /search  200 OK                 per-endpoint (endpoint)  3 of 8   -
	//   7   t=0s  bob    pro   GET /search  200 OK                 per-endpoint (endpoint)  2 of 8   -
	//   8   t=0s  bob    pro   GET /search  200 OK                 per-endpoint (endpoint)  1 of 8   -
	//   9   t=0s  bob    pro   GET /search  200 OK                 per-endpoint (endpoint)  0 of 8   -
	//   10  t=0s  bob    pro   GET /search  429 Too Many Requests  per-endpoint (endpoint)  0 of 8   200ms (Retry-After: 1)
	//   11  t=0s  bob    pro   GET /items   200 OK                 global (global)          1 of 10  -
	//   12  t=0s  bob    pro   GET /items   200 OK                 global (global)          0 of 10  -
	//   13  t=0s  bob    pro   GET /items   429 Too Many Requests  global (global)          0 of 10  50ms (Retry-After: 1)
	//   14  t=1s  alice  free  GET /search  200 OK                 per-user (user)          0 of 3   -
	//
	//   The deciding tier is the one that denied or, when allowed, the one with the fewest tokens left.
	//   A request denied by one tier takes nothing from the others.
}
