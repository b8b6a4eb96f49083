package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/rules"
)

// TestRulesFile checks that the file the servers load holds the tiers the
// checks count against: same names, scopes, plans, routes and numbers.
func TestRulesFile(t *testing.T) {
	policy, err := rules.Parse("rules.yaml", []byte(rulesYAML()))
	if err != nil {
		t.Fatal(err)
	}
	got := policy.Rules()
	if len(got) != len(tiers) {
		t.Fatalf("the file has %d rules, want %d", len(got), len(tiers))
	}
	for i, r := range got {
		want := tiers[i]
		wantLimit := core.TokenBucket(core.Rate{N: want.Rate, Per: want.Period}, want.Burst)
		if r.Name != want.Name || string(r.Scope) != want.Scope || r.Plan != want.Plan {
			t.Errorf("rule %d = %s %s %q, want %s %s %q", i, r.Name, r.Scope, r.Plan, want.Name, want.Scope, want.Plan)
		}
		if r.Limit.String() != wantLimit.String() {
			t.Errorf("rule %d (%s): limit %v, want %v", i, r.Name, r.Limit, wantLimit)
		}
		if search := len(r.Routes) == 1 && r.Routes[0] == "GET /search"; search != want.Search || (!want.Search && len(r.Routes) != 0) {
			t.Errorf("rule %d (%s): routes %q, want search only = %v", i, r.Name, r.Routes, want.Search)
		}
	}
}

func TestAllowed(t *testing.T) {
	tr := tier{Rate: 2, Period: time.Second, Burst: 5}
	for _, tc := range []struct {
		elapsed time.Duration
		want    int64
	}{
		{-time.Second, 5},
		{0, 5},
		{499 * time.Millisecond, 5},
		{500 * time.Millisecond, 6},
		{30 * time.Second, 65},
	} {
		if got := tr.allowed(tc.elapsed); got != tc.want {
			t.Errorf("allowed(%v) = %d, want %d", tc.elapsed, got, tc.want)
		}
	}
}

// TestWorkload reads back the requests the targeter makes and checks their
// shares and the buckets each takes from.
func TestWorkload(t *testing.T) {
	w := &workload{bases: []string{"http://a", "http://b"}, users: 100, seed: 7}
	tr := w.targeter()
	var hot, anon, search, n int
	hosts := map[string]int{}
	for range 20000 {
		var tg vegeta.Target
		if err := tr(&tg); err != nil {
			t.Fatal(err)
		}
		n++
		hosts[tg.URL[:8]]++
		c, s, err := parseRequest(tg.URL)
		if err != nil {
			t.Fatal(err)
		}
		if s {
			search++
		}
		switch {
		case c.user < 0:
			anon++
			if tg.Header.Get("X-User") != "" || c.ip < 0 || c.ip >= anonymousIPs {
				t.Fatalf("%s: anonymous with X-User %q, ip %d", tg.URL, tg.Header.Get("X-User"), c.ip)
			}
		case c.user == w.users:
			hot++
			fallthrough
		default:
			if tg.Header.Get("X-User") != w.user(c.user) || tg.Header.Get("X-Plan") != w.plan(c.user) {
				t.Fatalf("%s: X-User %q X-Plan %q, want %q %q", tg.URL, tg.Header.Get("X-User"), tg.Header.Get("X-Plan"), w.user(c.user), w.plan(c.user))
			}
		}
	}
	share := func(k int) float64 { return float64(k) / float64(n) }
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"hot user", share(hot), hotUserShare}, {"anonymous", share(anon), anonymousShare}, {"search", share(search), searchShare}} {
		if c.got < c.want-0.02 || c.got > c.want+0.02 {
			t.Errorf("%s share %.3f, want %.3f", c.name, c.got, c.want)
		}
	}
	if hosts["http://a"] != n/2 || hosts["http://b"] != n/2 {
		t.Errorf("instances got %v, want round-robin", hosts)
	}

	names := func(c caller, search bool) string {
		var out []string
		for _, b := range w.buckets(c, search, nil) {
			out = append(out, tiers[b.tier].Name+"("+tiers[b.tier].Plan+")="+b.key)
		}
		return strings.Join(out, " ")
	}
	for _, tc := range []struct {
		c      caller
		search bool
		want   string
	}{
		{caller{user: 1}, false, "per-user(free)=user-1 global()="},
		{caller{user: 1}, true, "per-user(free)=user-1 search(free)=user-1 search-endpoint()=GET /search global()="},
		{caller{user: 5}, false, "per-user(pro)=user-5 global()="},
		{caller{user: 100}, true, "per-user(pro)=user-hot search(pro)=user-hot search-endpoint()=GET /search global()="},
		{caller{user: -1, ip: 3}, true, "per-ip(anonymous)=127.0.1.4 search-endpoint()=GET /search global()="},
	} {
		if got := names(tc.c, tc.search); got != tc.want {
			t.Errorf("buckets(%+v, %v) = %s, want %s", tc.c, tc.search, got, tc.want)
		}
	}
}

// TestSummarize checks the exact-math check on made-up runs: it finds
// over-admission, and does not see any in an exact run.
func TestSummarize(t *testing.T) {
	hot := "?u=10"
	mk := func(admitted int) *result {
		r := &result{Target: target{Framework: "gin", Store: "memory", Instances: 1}, Elapsed: 2 * time.Second}
		for i := range admitted + 3 {
			code := uint16(200)
			if i >= admitted {
				code = 429
			}
			r.Samples = append(r.Samples, sample{at: time.Duration(i) * time.Millisecond, latency: time.Millisecond, code: code, url: "http://a/items/1" + hot})
		}
		return r
	}
	// The hot user is pro: 20 at once and 10 a second, so 40 over 2s.
	for _, tc := range []struct {
		admitted int
		over     int64
	}{{40, 0}, {39, 0}, {43, 3}} {
		s, err := summarize(mk(tc.admitted), 10)
		if err != nil {
			t.Fatal(err)
		}
		if s.Over != tc.over || (tc.over > 0) != (s.OverBuckets == 1) {
			t.Errorf("%d admitted: over %d in %d buckets, want %d", tc.admitted, s.Over, s.OverBuckets, tc.over)
		}
		if s.OK != tc.admitted || s.Denied != 3 || s.Requests != tc.admitted+3 {
			t.Errorf("%d admitted: counted %d ok, %d denied of %d", tc.admitted, s.OK, s.Denied, s.Requests)
		}
	}
}

func TestParseInfo(t *testing.T) {
	text := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\n# Stats\r\ntotal_commands_processed:1234\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=100,usec=40,usec_per_call=0.40\r\ncmdstat_get:calls=7,usec=1\r\ncmdstat_eval:calls=2,usec=9\r\n"
	st, err := parseInfo(text)
	if err != nil {
		t.Fatal(err)
	}
	if st.cpu != 1750*time.Millisecond || st.commands != 1234 || st.scripts != 102 {
		t.Errorf("parseInfo = %+v", st)
	}
	if _, err := parseInfo("used_cpu_sys:1\r\n"); err == nil {
		t.Error("parseInfo of a partial INFO: nil error")
	}
}

func TestParseMetrics(t *testing.T) {
	text := "# HELP x\nrate_limiter_rejected_total 12\nrate_limiter_redis_takes_total{via=\"local\"} 5\nother 1\n"
	m, err := parseMetrics(strings.NewReader(text), "rate_limiter_")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m["rate_limiter_rejected_total"] != 12 || m[`rate_limiter_redis_takes_total{via="local"}`] != 5 {
		t.Errorf("parseMetrics = %v", m)
	}
}

// TestChart draws a chart and checks that it is well-formed XML with a line
// per series.
func TestChart(t *testing.T) {
	c := &chart{Title: "a < b", XLabel: "s", YLabel: "ms", ShadeFrom: 1, ShadeTo: 2, ShadeLabel: "down",
		Series: []series{
			{Name: "one", X: []float64{0, 1, 2, 3}, Y: []float64{1, 2, 0.5, 4}},
			{Name: "two", X: []float64{0, 1, 2, 3}, Y: []float64{2, nan(), 3, 3}, Dashed: true},
		}}
	var b bytes.Buffer
	if err := c.writeSVG(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	lines := 0
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		if e, ok := tok.(xml.StartElement); ok && e.Name.Local == "polyline" {
			lines++
		}
	}
	// The second series is broken in two by its missing point.
	if lines != 3 {
		t.Errorf("%d polylines, want 3", lines)
	}
	for _, tc := range []struct{ raw, want float64 }{{0.3, 0.5}, {7, 10}, {120, 200}, {1, 1}} {
		if got := niceStep(tc.raw); got != tc.want {
			t.Errorf("niceStep(%v) = %v, want %v", tc.raw, got, tc.want)
		}
	}
}

// TestRun drives the gin example briefly, without and with the limiter in
// memory and on Redis, and checks the report: every admitted request within
// the math, none failed.
func TestRun(t *testing.T) {
	out := filepath.Join(t.TempDir(), "LOADTEST.md")
	cfg := config{Rate: 300, Duration: 2 * time.Second, Users: 50, Seed: 1, Only: `^gin (none|memory|redis/go-redis)$`, Out: out, Plots: "plots"}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := run(ctx, cfg, []string{"loadtest", "-rate", "300"}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| gin none | 600 |", "| gin memory |", "| gin redis/go-redis |", "plots/latency-gin.svg", "plots/admitted.svg"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("LOADTEST.md lacks %q", want)
		}
	}
	if strings.Contains(string(md), "This run failed") {
		t.Errorf("the run failed:\n%s", md)
	}
	for _, f := range []string{"latency-gin.svg", "admitted.svg"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(out), "plots", f)); err != nil {
			t.Error(err)
		}
	}
	if err := run(ctx, config{Rate: 10, Duration: time.Second, Users: 1, Only: "nothing"}, nil); err == nil || !strings.Contains(err.Error(), "matches no target") {
		t.Errorf("run with -only matching nothing: %v", err)
	}
	if err := run(ctx, config{Rate: 10, Duration: 5 * time.Second, Users: 1, Outage: true}, nil); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("run with an outage longer than the run: %v", err)
	}
}

func nan() float64 { return math.NaN() }
