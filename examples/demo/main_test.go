package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSeed: the corrected seed timeline. t=0 four pass; t=0.5 one passes;
// t=1 one passes; t=2 two of three pass and the third waits 500ms.
func TestSeed(t *testing.T) {
	want := []SeedResult{
		{0, true, 3, 0},
		{0, true, 2, 0},
		{0, true, 1, 0},
		{0, true, 0, 0},
		{500 * time.Millisecond, true, 0, 0},
		{time.Second, true, 0, 0},
		{2 * time.Second, true, 1, 0},
		{2 * time.Second, true, 0, 0},
		{2 * time.Second, false, 0, 500 * time.Millisecond},
	}
	got, err := runSeed()
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
		user, endpoint string
		allowed        bool
		rule           string // the deciding tier
		status         int
	}
	ok := func(user, endpoint, rule string) outcome { return outcome{user, endpoint, true, rule, 200} }
	denied := func(user, endpoint, rule string) outcome { return outcome{user, endpoint, false, rule, 429} }
	want := []outcome{
		ok("alice", "GET /search", "per-user"),
		ok("alice", "GET /search", "per-user"),
		ok("alice", "GET /search", "per-user"),
		denied("alice", "GET /search", "per-user"),
		ok("bob", "GET /search", "per-endpoint"),
		ok("bob", "GET /search", "per-endpoint"),
		ok("bob", "GET /search", "per-endpoint"),
		ok("bob", "GET /search", "per-endpoint"),
		ok("bob", "GET /search", "per-endpoint"),
		denied("bob", "GET /search", "per-endpoint"),
		ok("bob", "GET /items", "global"),
		ok("bob", "GET /items", "global"),
		denied("bob", "GET /items", "global"),
		ok("alice", "GET /search", "per-user"),
	}
	got, err := runPlans()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("runPlans: %d results, want %d", len(got), len(want))
	}
	for i, r := range got {
		g := outcome{r.User, r.Endpoint, r.Allowed, r.Rule, r.Status}
		if g != want[i] {
			t.Errorf("request #%d = %+v, want %+v", i+1, g, want[i])
			continue
		}
		checkResponse(t, i+1, r)
	}
	// Alice's retry happens exactly when her Retry-After says she may.
	retry, err := strconv.Atoi(header(got[3].Headers, "Retry-After"))
	if err != nil || time.Duration(retry)*time.Second != got[13].At-got[3].At {
		t.Errorf("alice retries at t0+%v, want after Retry-After %q of request #4", got[13].At, header(got[3].Headers, "Retry-After"))
	}
}

// checkResponse checks the headers and body a client receives for r.
func checkResponse(t *testing.T, n int, r PlanResult) {
	t.Helper()
	if got, want := header(r.Headers, "X-RateLimit-Remaining"), strconv.FormatInt(r.Remaining, 10); got != want {
		t.Errorf("#%d: X-RateLimit-Remaining = %q, want %q", n, got, want)
	}
	policy := header(r.Headers, "RateLimit-Policy")
	for _, tier := range []string{`"per-user";q=`, `"per-endpoint";q=8;w=2`, `"global";q=10;w=1`} {
		if !strings.Contains(policy, tier) {
			t.Errorf("#%d: RateLimit-Policy %s lacks %s", n, policy, tier)
		}
	}
	if want := `"` + r.Rule + `";r=`; !strings.HasPrefix(header(r.Headers, "RateLimit"), want) {
		t.Errorf("#%d: RateLimit = %s, want the deciding tier %s", n, header(r.Headers, "RateLimit"), r.Rule)
	}
	if r.Allowed {
		if r.Body != "" || header(r.Headers, "Retry-After") != "" {
			t.Errorf("#%d: allowed request has body %q, Retry-After %q", n, r.Body, header(r.Headers, "Retry-After"))
		}
		return
	}
	retry, err := strconv.Atoi(header(r.Headers, "Retry-After"))
	if err != nil || retry < 1 || time.Duration(retry)*time.Second < r.RetryAfter {
		t.Errorf("#%d: Retry-After %q for a wait of %v", n, header(r.Headers, "Retry-After"), r.RetryAfter)
	}
	if got := header(r.Headers, "Content-Type"); got != "application/problem+json" {
		t.Errorf("#%d: Content-Type = %q", n, got)
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
		len(body.ViolatedPolicies) != 1 || body.ViolatedPolicies[0] != r.Rule {
		t.Errorf("#%d: body = %+v, want quota-exceeded, 429, violated-policies [%s]", n, body, r.Rule)
	}
}

func TestRun(t *testing.T) {
	var buf bytes.Buffer
	if err := run(&buf); err != nil {
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
	rs, err := runSeed()
	if err != nil {
		panic(err)
	}
	printSeed(os.Stdout, rs)
	// Output:
	// (a) Seed timeline: token bucket, capacity 4, refill 2/s, starting full
	//
	//   time    request  outcome  remaining  retry after
	//   t=0.0s  #1       allowed  3          -
	//   t=0.0s  #2       allowed  2          -
	//   t=0.0s  #3       allowed  1          -
	//   t=0.0s  #4       allowed  0          -
	//   t=0.5s  #5       allowed  0          -
	//   t=1.0s  #6       allowed  0          -
	//   t=2.0s  #7       allowed  1          -
	//   t=2.0s  #8       allowed  0          -
	//   t=2.0s  #9       DENIED   0          500ms
}
