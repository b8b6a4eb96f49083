// Package apitest drives an example server through one scenario and checks
// every answer: the status, the deciding tier and the rate-limit fields. The
// net/http, gin, fiber and gRPC examples all pass the same scenario, which
// is how their tests show that the frameworks agree.
package apitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Step is one request of the scenario and the answer it must get.
type Step struct {
	User   string // X-User; when empty, Token or nobody
	Token  string // a bearer token, sent when User is empty
	Plan   string // X-Plan; empty is the free plan
	Search bool   // GET /search?q=go; otherwise GET /items/42

	Allowed    bool
	Tier       string        // the deciding tier: the denying one, or the one with the fewest tokens left
	Remaining  int64         // the deciding tier's tokens left
	RetryAfter time.Duration // when denied: the exact wait
}

// String describes the request of s, for failure messages.
func (s Step) String() string {
	who := s.User
	switch {
	case who == "" && s.Token != "":
		who = "token " + s.Token
	case who == "":
		who = "anonymous"
	}
	plan := s.Plan
	if plan == "" {
		plan = "free"
	}
	route := "items"
	if s.Search {
		route = "search"
	}
	return fmt.Sprintf("%s (%s) %s", who, plan, route)
}

// Free is the start of the scenario, one free user's: two searches pass and
// the third is denied by the search tier; her per-user tier, which the
// searches drew on too, then lets three more requests through. Its waits
// are seconds, so it holds on a store with a real clock (Redis) too.
func Free() []Step {
	return []Step{
		{User: "ann", Search: true, Allowed: true, Tier: "search", Remaining: 1},
		{User: "ann", Search: true, Allowed: true, Tier: "search", Remaining: 0},
		{User: "ann", Search: true, Tier: "search", RetryAfter: 10 * time.Second},
		{User: "ann", Allowed: true, Tier: "per-user", Remaining: 2},
		{User: "ann", Allowed: true, Tier: "per-user", Remaining: 1},
		{User: "ann", Allowed: true, Tier: "per-user", Remaining: 0},
		{User: "ann", Tier: "per-user", RetryAfter: 6 * time.Second},
	}
}

// Scenario is Free, then a pro user with larger tiers, a user known by a
// bearer token, and anonymous requests until the global tier, which every
// request so far drew on, denies. It needs a clock that stands still (a
// core.ManualClock): the global tier refills a token every 10ms.
func Scenario() []Step {
	steps := append(Free(),
		Step{User: "bob", Plan: "pro", Search: true, Allowed: true, Tier: "search", Remaining: 9},
		Step{User: "bob", Plan: "pro", Allowed: true, Tier: "per-user", Remaining: 48},
		Step{Token: "s3cret", Allowed: true, Tier: "per-user", Remaining: 4},
	)
	// 8 of the global tier's 100 tokens are gone.
	for left := int64(91); left >= 0; left-- {
		steps = append(steps, Step{Allowed: true, Tier: "global", Remaining: left})
	}
	return append(steps, Step{Tier: "global", RetryAfter: 10 * time.Millisecond})
}

// Header calls set for each request field of s: X-User or Authorization,
// and X-Plan, as HTTP header fields or gRPC metadata.
func (s Step) Header(set func(name, value string)) {
	if s.User != "" {
		set("X-User", s.User)
	} else if s.Token != "" {
		set("Authorization", "Bearer "+s.Token)
	}
	if s.Plan != "" {
		set("X-Plan", s.Plan)
	}
}

// CheckHTTP sends the steps to the server at base ("http://127.0.0.1:port")
// in order and checks each answer: status 200 or 429, the deciding tier in
// RateLimit, X-RateLimit-Remaining, and for a denial Retry-After (whole
// seconds, rounded up) and the problem body naming the tier.
func CheckHTTP(t testing.TB, base string, steps []Step) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i, s := range steps {
		path := "/items/42"
		if s.Search {
			path = "/search?q=go"
		}
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.Header(req.Header.Set)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("step %d, %v: %v", i+1, s, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("step %d, %v: reading the body: %v", i+1, s, err)
		}
		if !checkHTTP(t, i+1, s, resp, body) {
			t.FailNow() // the steps after a wrong answer would all be wrong
		}
	}
}

func checkHTTP(t testing.TB, n int, s Step, resp *http.Response, body []byte) bool {
	t.Helper()
	ok := true
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("step %d, %v: "+format, append([]any{n, s}, args...)...)
		ok = false
	}
	want := http.StatusOK
	if !s.Allowed {
		want = http.StatusTooManyRequests
	}
	if resp.StatusCode != want {
		fail("status %d, want %d (body %q)", resp.StatusCode, want, body)
		return false
	}
	if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, strconv.Quote(s.Tier)+";") {
		fail("RateLimit = %q, want the %q tier", got, s.Tier)
	}
	if got, want := resp.Header.Get("X-RateLimit-Remaining"), strconv.FormatInt(s.Remaining, 10); got != want {
		fail("X-RateLimit-Remaining = %q, want %q", got, want)
	}
	if s.Allowed {
		if got := resp.Header.Get("Retry-After"); got != "" {
			fail("allowed, with Retry-After %q", got)
		}
		return ok
	}
	if got, want := resp.Header.Get("Retry-After"), strconv.FormatInt(int64((s.RetryAfter+time.Second-1)/time.Second), 10); got != want {
		fail("Retry-After = %q, want %q", got, want)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/problem+json" {
		fail("Content-Type = %q, want application/problem+json", got)
	}
	var problem struct {
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal(body, &problem); err != nil {
		fail("body %q: %v", body, err)
	} else if problem.Status != 429 || len(problem.Violated) != 1 || problem.Violated[0] != s.Tier {
		fail("body %s, want status 429 and violated-policies [%q]", body, s.Tier)
	}
	return ok
}
