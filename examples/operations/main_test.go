package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jackc/pgx/v5/pgxpool"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/internal/pgtest"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// The service end to end on real servers: rules from PostgreSQL, buckets
// in Redis, violations audited to PostgreSQL, metrics scraped over HTTP,
// buckets inspected and reset on the admin port; a rule changed with an
// UPDATE while 64 clients send requests.
func TestService(t *testing.T) {
	pg := pgtest.Start(t)
	rdb := redistest.Standalone(t)
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx := context.Background()
	cfg := config{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Postgres: pg.URL(), Redis: rdb.Addr, DefaultPlan: "free"}

	// The rules: the seed's per-user plans, a search endpoint tier, and a
	// per-IP tier in shadow mode to try out before enforcing it.
	pool, err := pgxpool.New(ctx, pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pglimit.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := pg.Exec(`INSERT INTO RateLimitRule (key_pattern, scope, rate_per_second, burst_capacity, plan, shadow) VALUES
		('user:{user_id}', 'user', 0.01, 3, 'free', false),
		('user:{user_id}', 'user', 100, 500, 'pro', false),
		('endpoint:/search', 'endpoint', 1000, 2000, NULL, false),
		('ip:{ip}', 'ip', 0.01, 4, NULL, true)`); err != nil {
		t.Fatal(err)
	}
	svc, err := start(ctx, cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			svc.Close(ctx)
		}
	}()
	api, admin := "http://"+svc.APIAddr, "http://"+svc.AdminAddr

	// ann (free): 3 searches, then 429; the shadow per-IP tier (burst 4)
	// would deny the 5th request and lets it through.
	var codes []int
	for range 5 {
		codes = append(codes, get(t, api+"/search?q=go", "ann", "").code)
	}
	if fmt.Sprint(codes) != "[200 200 200 429 429]" {
		t.Fatalf("ann's searches: %v, want 3 allowed then 429", codes)
	}
	// bob (pro) from the same address: the per-IP tier is in shadow, so
	// he is not denied, and it is not in his headers.
	r := get(t, api+"/items/1", "bob", "pro")
	if r.code != 200 || strings.Contains(r.header.Get("RateLimit-Policy"), "ip.") {
		t.Fatalf("bob: %d, RateLimit-Policy %q; want 200 without the shadow tier", r.code, r.header.Get("RateLimit-Policy"))
	}

	// The operator looks at ann's buckets and unblocks her.
	var inspected struct {
		Tiers []struct {
			Rule      string
			Remaining int64
		}
	}
	body := get(t, admin+"/ratelimit/buckets?user=ann&ip=127.0.0.1&route=/search&method=GET&endpoint=/search&plan=free", "", "").body
	if err := json.Unmarshal([]byte(body), &inspected); err != nil || len(inspected.Tiers) != 3 || inspected.Tiers[0].Remaining != 0 {
		t.Fatalf("inspect ann: %s (%v), want her 3 tiers, user.free empty", body, err)
	}
	req, _ := http.NewRequest(http.MethodDelete, admin+"/ratelimit/buckets?user=ann&plan=free", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("reset ann: %v %v", resp, err)
	}
	if r := get(t, api+"/items/2", "ann", ""); r.code != 200 {
		t.Fatalf("ann after the reset: %d, want 200", r.code)
	}

	// The free plan's burst raised in the table while 64 clients send
	// requests: the new limit is in the headers within a second, and no
	// request fails.
	changed := underLoad(t, api, "30", func() {
		if err := pg.Exec("UPDATE RateLimitRule SET burst_capacity = 30 WHERE plan = 'free'"); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("UPDATE to the first response with the new limit, 64 clients: %v", changed)
	if changed > time.Second {
		t.Errorf("the new rule took %v to apply, want < 1s", changed)
	}

	// The metrics, scraped and parsed as Prometheus does.
	text := get(t, admin+"/metrics", "", "").body
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	requests := value(t, families, "rate_limiter_requests_total", nil)
	rejected := value(t, families, "rate_limiter_rejected_total", nil)
	if want := value(t, families, "rate_limiter_allowed_total", nil) + rejected; requests != want || requests < 100 {
		t.Errorf("requests_total %v, want allowed + rejected = %v, and the load's requests", requests, want)
	}
	if rejected != 2 || value(t, families, "rate_limiter_decisions_total", map[string]string{"outcome": "denied", "rule": "user.free", "scope": "user"}) != 2 {
		t.Errorf("rejected_total %v, want ann's 2 denials by user.free", rejected)
	}
	if v := value(t, families, "rate_limiter_decisions_total", map[string]string{"outcome": "shadow_denied", "rule": "ip", "scope": "ip"}); v < 1 {
		t.Errorf("shadow denials by ip: %v, want at least ann's 5th search", v)
	}
	if v := value(t, families, "rate_limiter_rules_loaded", map[string]string{"source": "postgres"}); v != 4 {
		t.Errorf("rules_loaded %v, want the 4 rows", v)
	}
	if v := value(t, families, "rate_limiter_redis_takes_total", map[string]string{"via": "script"}); v < requests-1 {
		t.Errorf("redis takes by script %v for %v decisions", v, requests)
	}
	if families["rate_limiter_latency_seconds"].GetMetric()[0].GetHistogram().GetSampleCount() == 0 {
		t.Error("no decision timed in rate_limiter_latency_seconds")
	}
	t.Logf("scrape (rate_limiter_ series, first lines):\n%s", sample(text))

	// Close flushes the audit log: one row per denying tier, shadow ones
	// included, at most one per bucket a second (the 2nd denial of ann's
	// within the second, and the load's shadow denials by the same IP, are
	// thinned), each with its rule_id; every row accepted arrives.
	enqueued := value(t, families, "rate_limiter_audit_rows_enqueued_total", nil)
	closed = true
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := pg.Query(`SELECT bucket_key, user_id, host(ip_address), endpoint, rule_id IS NOT NULL FROM RateLimitViolation ORDER BY violation_id`)
	if err != nil {
		t.Fatal(err)
	}
	var ann, shadow int
	for _, row := range rows {
		switch {
		case row[0] == "user.free:ann" && row[1] == "ann" && row[2] == "127.0.0.1" && row[3] == "GET /search" && row[4] == "t":
			ann++
		case row[0] == "ip:127.0.0.1" && row[4] == "t":
			shadow++
		}
	}
	if float64(len(rows)) != enqueued || ann != 1 || shadow != 1 {
		t.Errorf("violations: %d rows for %v accepted, %d of ann's by user.free (want 1), %d shadow by ip (want 1): %q\nlog:\n%s", len(rows), enqueued, ann, shadow, rows, logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"pglimit: rules loaded"`) {
		t.Errorf("the log does not show the rules loading:\n%s", logs.String())
	}
}

// The service on the in-memory store with its rules in a watched file: a
// rewrite of the file is in force for the next requests.
func TestServiceFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	write := func(burst int) {
		t.Helper()
		yaml := fmt.Sprintf("default_plan: free\nrules:\n  - key_pattern: \"user:{user_id}\"\n    rate_per_second: 0.01\n    burst_capacity: %d\n    plan: free\n", burst)
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // as editors and config managers do
			t.Fatal(err)
		}
	}
	write(1)
	svc, err := start(context.Background(), config{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", Rules: path, DefaultPlan: "free"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())
	api := "http://" + svc.APIAddr
	if a, b := get(t, api+"/items/1", "cy", "").code, get(t, api+"/items/1", "cy", "").code; a != 200 || b != 429 {
		t.Fatalf("burst 1: %d then %d, want 200 then 429", a, b)
	}
	// The file rewritten while 64 clients send requests: the new limit is
	// in the headers within a second, and no request fails.
	changed := underLoad(t, api, "5", func() { write(5) })
	t.Logf("file rewritten to the first response with the new limit, 64 clients: %v", changed)
	if changed > time.Second {
		t.Errorf("the new file took %v to apply, want < 1s", changed)
	}
	metrics := get(t, "http://"+svc.AdminAddr+"/metrics", "", "").body
	for _, want := range []string{`rate_limiter_rules_reloads_total{source="file"} 1`, `rate_limiter_rules_reload_failures_total{source="file"} 0`, "rate_limiter_rejected_total 1"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, sample(metrics))
		}
	}
}

type response struct {
	code   int
	header http.Header
	body   string
}

func get(t *testing.T, url, user, plan string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	if plan != "" {
		req.Header.Set("X-Plan", plan)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

// underLoad runs change while 64 clients send requests as distinct free
// users, and returns the time from the change to the first response whose
// X-RateLimit-Limit is limit. It fails t if any request fails.
func underLoad(t *testing.T, api, limit string, change func()) time.Duration {
	t.Helper()
	var (
		stop   atomic.Bool
		seen   atomic.Int64
		sent   atomic.Int64
		failed atomic.Int64
		wg     sync.WaitGroup
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for g := range 64 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				req, _ := http.NewRequest(http.MethodGet, api+"/items/"+strconv.Itoa(i), nil)
				req.Header.Set("X-User", fmt.Sprintf("load-%d-%d", g, i))
				resp, err := client.Do(req)
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
				if resp.Header.Get("X-RateLimit-Limit") == limit {
					seen.CompareAndSwap(0, time.Now().UnixNano())
				}
			}
		})
	}
	defer func() {
		stop.Store(true)
		wg.Wait()
		if n := failed.Load(); n != 0 {
			t.Errorf("%d of %d requests failed under load, want 0", n, sent.Load())
		}
	}()
	for sent.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	begin := time.Now()
	change()
	for seen.Load() == 0 {
		if time.Since(begin) > 10*time.Second {
			t.Fatalf("no response with limit %s 10s after the change", limit)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Unix(0, seen.Load()).Sub(begin)
}

// value returns the value of the series name with labels (nil: the only
// series), failing t if there is none.
func value(t *testing.T, families map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	f, ok := families[name]
	if !ok {
		t.Fatalf("no series %s", name)
	}
next:
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// sample returns the rate_limiter_ sample lines of a scrape.
func sample(text string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "rate_limiter_") && !strings.Contains(l, "_bucket{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// lockedBuffer collects log records written from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
