package limits

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

func TestKeys(t *testing.T) {
	user, plan, err := Keys()
	if err != nil {
		t.Fatal(err)
	}
	bearer, err := keyfuncs.BearerToken()
	if err != nil {
		t.Fatal(err)
	}
	token, err := bearer(keyfuncs.Static{Header: map[string][]string{"Authorization": {"Bearer s3cret"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		header     map[string][]string
		user, plan string
		anonymous  bool
	}{
		{"anonymous", nil, "", "", true},
		{"X-User", map[string][]string{"X-User": {"ann"}}, "ann", "", false},
		{"gRPC metadata", map[string][]string{"x-user": {"ann"}, "x-plan": {"pro"}}, "ann", "pro", false},
		{"bearer token", map[string][]string{"Authorization": {"Bearer s3cret"}}, token, "", false},
		{"X-User before the token", map[string][]string{"X-User": {"ann"}, "Authorization": {"Bearer s3cret"}}, "ann", "", false},
		{"pro", map[string][]string{"X-User": {"bob"}, "X-Plan": {"pro"}}, "bob", "pro", false},
		{"unknown plan", map[string][]string{"X-User": {"bob"}, "X-Plan": {"gold"}}, "bob", "gold", false},
	} {
		r := keyfuncs.Static{Header: tc.header}
		u, err := user(r)
		if tc.anonymous {
			if !errors.Is(err, keyfuncs.ErrNotApplicable) {
				t.Errorf("%s: user = %q, %v; want ErrNotApplicable", tc.name, u, err)
			}
		} else if u != tc.user || err != nil {
			t.Errorf("%s: user = %q, %v; want %q", tc.name, u, err, tc.user)
		}
		p, err := plan(r)
		if tc.plan == "" {
			if !errors.Is(err, keyfuncs.ErrNotApplicable) {
				t.Errorf("%s: plan = %q, %v; want ErrNotApplicable (the default plan)", tc.name, p, err)
			}
		} else if p != tc.plan || err != nil {
			t.Errorf("%s: plan = %q, %v; want %q", tc.name, p, err, tc.plan)
		}
	}
}

func TestFlags(t *testing.T) {
	var f Flags
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	f.Register(fs)
	if f.RedisClient != "go-redis" || f.RedisTimeout != 100*time.Millisecond {
		t.Errorf("defaults %+v, want go-redis and 100ms", f)
	}
	if err := fs.Parse([]string{"-redis", "localhost:6379", "-redis-cluster", "a:1,b:2", "-redis-client", "rueidis", "-redis-timeout", "1s"}); err != nil {
		t.Fatal(err)
	}
	if want := (Flags{Redis: "localhost:6379", RedisCluster: "a:1,b:2", RedisClient: "rueidis", RedisTimeout: time.Second}); f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
	if _, _, err := f.NewLimiter(); err == nil || !strings.Contains(err.Error(), "exclusive") {
		t.Errorf("NewLimiter with both flags: %v, want an error", err)
	}
	if _, _, err := (Flags{Redis: "127.0.0.1:1", RedisClient: "redigo"}).NewLimiter(); err == nil || !strings.Contains(err.Error(), "redigo") {
		t.Errorf("NewLimiter with an unknown client: %v, want an error", err)
	}
	for _, client := range []string{"go-redis", "rueidis"} {
		if _, _, err := (Flags{Redis: "127.0.0.1:1", RedisClient: client}).NewLimiter(); err == nil {
			t.Errorf("NewLimiter with no Redis listening, %s: nil error", client)
		}
	}
}

// TestRulesFile serves the rules of a -rules file, and -no-limit refuses
// the flags that need a limiter.
func TestRulesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "limits.yaml")
	const file = "rules:\n  - name: per-ip\n    scope: ip\n    rate_per_second: 1\n    burst_capacity: 2\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	var f Flags
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse([]string{"-rules", path}); err != nil {
		t.Fatal(err)
	}
	limiter, stop, err := f.NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	req := core.Request{IP: "192.0.2.1", Route: "/items/{id}"}
	for i, want := range []bool{true, true, false} {
		d, err := limiter.Allow(context.Background(), req)
		if err != nil || d.Allowed != want || d.Rule != "per-ip" {
			t.Errorf("#%d: Allow = %v by %q, %v; want %v by per-ip", i+1, d.Allowed, d.Rule, err, want)
		}
	}
	if _, _, err := (Flags{Rules: filepath.Join(t.TempDir(), "missing.yaml")}).NewLimiter(); err == nil {
		t.Error("NewLimiter with a missing rules file: nil error")
	}
	if limiter, stop, err := (Flags{NoLimit: true}).NewLimiter(); limiter != nil || err != nil {
		t.Errorf("NewLimiter with -no-limit = %v, %v; want no limiter", limiter, err)
	} else if err := stop(); err != nil {
		t.Error(err)
	}
	if _, _, err := (Flags{NoLimit: true, Rules: path}).NewLimiter(); err == nil || !strings.Contains(err.Error(), "-no-limit") {
		t.Errorf("NewLimiter with -no-limit and -rules: %v, want an error", err)
	}
}

// TestMetrics serves the limiter's decisions and the Redis store's takes at
// /metrics.
func TestMetrics(t *testing.T) {
	srv := redistest.Standalone(t)
	limiter, stop, err := (Flags{Redis: srv.Addr, Metrics: "127.0.0.1:0"}).NewLimiter()
	if err != nil {
		t.Fatal(err)
	}
	stop()
	store, closeStore, err := goRedisStore(context.Background(), []string{srv.Addr}, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opt, stopMetrics, err := serveMetrics(ln, store)
	if err != nil {
		t.Fatal(err)
	}
	defer stopMetrics()
	if limiter, err = NewLimiter(store, opt); err != nil {
		t.Fatal(err)
	}
	checkTiers(t, limiter, "metrics")
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rate_limiter_requests_total 7", "rate_limiter_rejected_total 2", `rate_limiter_redis_takes_total{via="script"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// TestRedis decides the search and per-user tiers of one user on Redis,
// standalone and Cluster, through either client, as the flags choose. No
// -redis-timeout: a test machine under load may take longer than a
// production bound, which would make the limiter fail open.
func TestRedis(t *testing.T) {
	standalone := redistest.Standalone(t)
	cluster := strings.Join(redistest.Cluster(t).Addrs(), ",")
	for _, tc := range []struct {
		name  string
		flags Flags
	}{
		{"go-redis", Flags{Redis: standalone.Addr}},
		{"rueidis", Flags{Redis: standalone.Addr, RedisClient: "rueidis"}},
		{"go-redis-cluster", Flags{RedisCluster: cluster}},
		{"rueidis-cluster", Flags{RedisCluster: cluster, RedisClient: "rueidis"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limiter, closeStore, err := tc.flags.NewLimiter()
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			checkTiers(t, limiter, tc.name) // a user of its own
		})
	}
}

// checkTiers checks the search and per-user tiers of user, whose buckets
// must be new: two searches, then three more requests of any kind.
func checkTiers(t *testing.T, limiter *core.Limiter, user string) {
	t.Helper()
	search := core.Request{User: user, Method: "GET", Route: "/search"}
	items := core.Request{User: user, Plan: "gold", Method: "GET", Route: "/items/{id}"} // gold: unknown, so free
	for i, tc := range []struct {
		req     core.Request
		allowed bool
		rule    string
	}{
		{search, true, "search"},
		{search, true, "search"},
		{search, false, "search"},
		{items, true, "per-user"},
		{items, true, "per-user"},
		{items, true, "per-user"},
		{items, false, "per-user"},
	} {
		d, err := limiter.Allow(context.Background(), tc.req)
		if err != nil || d.Degraded {
			t.Fatalf("#%d: Allow = %v, degraded %v (%v)", i+1, err, d.Degraded, d.Err)
		}
		if d.Allowed != tc.allowed || d.Rule != tc.rule {
			t.Errorf("#%d: Allow = %v by %q, want %v by %q", i+1, d.Allowed, d.Rule, tc.allowed, tc.rule)
		}
	}
}
