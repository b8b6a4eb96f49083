package promlimit_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	promlimit "github.com/bucketry/ratelimit/adapters/prometheus"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/nethttp"
)

// TestHTTPScrape runs a service on a loopback port with the net/http
// middleware over two Metrics (limiter="api" on the memory store, with a
// shadow rule; limiter="backup" over two limiters whose store is down, one
// failing open, one closed), makes requests, scrapes /metrics over HTTP
// and parses it with the Prometheus text parser. Run with -v to see the
// scrape.
func TestHTTPScrape(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))

	store, err := core.NewMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	api, err := promlimit.New(promlimit.WithSources(store), promlimit.WithConstLabels(prometheus.Labels{"limiter": "api"}))
	if err != nil {
		t.Fatal(err)
	}
	backup, err := promlimit.New(promlimit.WithConstLabels(prometheus.Labels{"limiter": "backup"}))
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(api, backup)

	route := func(pattern string, m *promlimit.Metrics, rules []core.Rule, opts ...core.Option) {
		p, err := core.NewPolicy(rules...)
		if err != nil {
			t.Fatal(err)
		}
		l, err := core.NewLimiter(p, append([]core.Option{core.WithObserver(m.Observe), core.WithLatencySampling(1)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		rl, err := nethttp.New(l)
		if err != nil {
			t.Fatal(err)
		}
		mux.Handle(pattern, rl.Handler(ok))
	}
	// Three an hour per client address, so nothing refills during the
	// test; the shadow rule would allow one request to the route.
	route("GET /search", api, []core.Rule{
		{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerHour(1), 3)},
		{Name: "search-shadow", Scope: core.ScopeEndpoint, Shadow: true, Limit: core.TokenBucket(core.PerHour(1), 1)},
	}, core.WithStore(store))
	global := []core.Rule{{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerSecond(100), 100)}}
	route("GET /open", backup, global, core.WithStore(downStore{}))
	route("GET /closed", backup, global, core.WithStore(downStore{}), core.WithFailureMode(core.FailClosed))

	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/search", 200}, // allowed
		{"/search", 200}, // shadow-denied by search-shadow
		{"/search", 200}, // shadow-denied by search-shadow
		{"/search", 429}, // denied by per-ip
		{"/search", 429}, // denied by per-ip
		{"/open", 200},   // degraded: the store is down, fail open
		{"/open", 200},   // degraded
		{"/closed", 503}, // error: the store is down, fail closed
	} {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("GET %s = %d, want %d", tc.path, resp.StatusCode, tc.status)
		}
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d, %v:\n%s", resp.StatusCode, err, body)
	}
	t.Logf("GET /metrics:\n%s", body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := parser.TextToMetricFamilies(bytes.NewReader(body)); err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	// Every line of want is in the scrape, and every decision counter
	// the scrape has at a value other than 0 is in want.
	want := []string{
		`rate_limiter_requests_total{limiter="api"} 5`,
		`rate_limiter_allowed_total{limiter="api"} 3`,
		`rate_limiter_rejected_total{limiter="api"} 2`,
		`rate_limiter_decisions_total{limiter="api",outcome="allowed",rule="",scope=""} 1`,
		`rate_limiter_decisions_total{limiter="api",outcome="shadow_denied",rule="search-shadow",scope="endpoint"} 2`,
		`rate_limiter_decisions_total{limiter="api",outcome="denied",rule="per-ip",scope="ip"} 2`,
		`rate_limiter_latency_seconds_count{limiter="api"} 5`,
		`rate_limiter_memory_keys{limiter="api"} 2`,
		`rate_limiter_memory_evictions_total{limiter="api"} 0`,
		`rate_limiter_requests_total{limiter="backup"} 3`,
		`rate_limiter_allowed_total{limiter="backup"} 2`,
		`rate_limiter_rejected_total{limiter="backup"} 1`,
		`rate_limiter_decisions_total{limiter="backup",outcome="degraded",rule="",scope=""} 2`,
		`rate_limiter_decisions_total{limiter="backup",outcome="error",rule="",scope=""} 1`,
		`rate_limiter_errors_total{kind="unavailable",limiter="backup"} 3`,
		`rate_limiter_latency_seconds_count{limiter="backup"} 3`,
	}
	lines := strings.Split(string(body), "\n")
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("the scrape lacks the line %s", w)
		}
	}
	decisionCounter := regexp.MustCompile(`^rate_limiter_(requests|allowed|rejected|decisions|errors)_total[{ ]`)
	for _, l := range lines {
		if decisionCounter.MatchString(l) && !strings.HasSuffix(l, " 0") && !slices.Contains(want, l) {
			t.Errorf("unexpected line %s", l)
		}
	}
}

// downStore fails every Take: a store whose server is gone.
type downStore struct{}

func (downStore) Take(context.Context, *core.Take) error {
	return errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")
}
