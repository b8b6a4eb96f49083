package redistests

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// The README's production set-up section is made of blocks, each opened by
// a marker line naming it; RunProduction checks that every block is
// exercised: the Go blocks appear verbatim in the test file that runs them,
// the redis.conf block is what the test's servers run with.

// readme returns the repository's README.md.
func readme(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "README.md"))
	if err != nil {
		t.Fatalf("reading the README: %v", err)
	}
	return string(b)
}

// ReadmeBlock returns the fenced block that follows the line
// "<!-- production: name -->" in the README, without its fences.
func ReadmeBlock(t testing.TB, name string) string {
	t.Helper()
	text := readme(t)
	marker := "<!-- production: " + name + " -->"
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("README: no %s", marker)
	}
	rest := text[i+len(marker):]
	open := strings.Index(rest, "```")
	if open < 0 {
		t.Fatalf("README: no code block after %s", marker)
	}
	rest = rest[open:]
	body := rest[strings.IndexByte(rest, '\n')+1:]
	end := strings.Index(body, "```")
	if end < 0 {
		t.Fatalf("README: the block after %s is not closed", marker)
	}
	return body[:end]
}

// CheckVerbatim fails t unless the README block name appears, line for
// line, in the Go file file (a path relative to the calling test's
// package), whatever the indentation and but for the line naming its
// source ("// From ...").
func CheckVerbatim(t testing.TB, name, file string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	norm := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			// The README's line naming the source is its own.
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "// From ") {
				out = append(out, l)
			}
		}
		return out
	}
	want, have := norm(ReadmeBlock(t, name)), norm(string(src))
	for i := range have {
		if i+len(want) <= len(have) && equal(have[i:i+len(want)], want) {
			return
		}
	}
	t.Fatalf("README block %q is not, line for line, in %s: the README shows code no test runs", name, file)
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// ServerArgs returns the README's redis.conf block as redis-server
// arguments ("--name value" per line), comments and blank lines skipped.
func ServerArgs(t testing.TB) []string {
	t.Helper()
	var args []string
	sc := bufio.NewScanner(strings.NewReader(ReadmeBlock(t, "redis.conf")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		args = append(args, "--"+f[0])
		args = append(args, f[1:]...)
	}
	if len(args) == 0 {
		t.Fatal("README: the redis.conf block sets nothing")
	}
	return args
}

// Production is a limiter built as the README recommends, and the store
// under it.
type Production struct {
	Limiter *core.Limiter
	States  func() map[string]core.BreakerState // the store's BreakerStates
	Close   func() error
}

// RunProduction runs the recommended set-up, built by build on the given
// addresses (cluster: a Cluster's), against a standalone server and a
// Cluster started with the README's redis.conf: decisions come from Redis;
// with the standalone server killed, each decision takes no longer than
// the default bound (plus slack for a loaded machine), the breaker opens
// and the fallback decides; after a restart decisions come from Redis
// again.
func RunProduction(t *testing.T, build func(t *testing.T, addrs []string, cluster bool, p *core.Policy) Production) {
	policy := Policy(t, core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(100), 100)})
	ctx := context.Background()
	fromRedis := func(t *testing.T, l *core.Limiter, user string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			d, err := l.Allow(ctx, core.Request{User: user})
			if err == nil && !d.Degraded && d.Allowed && d.Limit == 100 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no decision from Redis within 10s: last %+v, %v", d, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.Cluster(t, redistest.WithArgs(ServerArgs(t)...))
		p := build(t, cl.Addrs(), true, policy)
		defer p.Close()
		for _, u := range []string{"a", "b", "c", "d", "e", "f"} {
			fromRedis(t, p.Limiter, u)
		}
	})
	t.Run("standalone outage", func(t *testing.T) {
		srv := redistest.Standalone(t, redistest.WithArgs(ServerArgs(t)...))
		p := build(t, []string{srv.Addr}, false, policy)
		defer p.Close()
		fromRedis(t, p.Limiter, "u")
		srv.Kill()
		const slack = 400 * time.Millisecond // a -race binary on a shared machine
		var slowest time.Duration
		for i := range 20 {
			start := time.Now()
			d, err := p.Limiter.Allow(ctx, core.Request{User: "u"})
			took := time.Since(start)
			slowest = max(slowest, took)
			if err != nil || !d.Degraded || d.Limit != 100 {
				t.Fatalf("decision %d with Redis dead: %+v, %v; want a degraded decision of the fallback", i, d, err)
			}
			if took > 100*time.Millisecond+slack {
				t.Fatalf("decision %d with Redis dead took %v, want within the 100ms bound (+%v slack)", i, took, slack)
			}
			if i >= 3 && !errors.Is(d.Err, core.ErrBreakerOpen) {
				t.Fatalf("decision %d: Err = %v; want the breaker open after 3 failures", i, d.Err)
			}
		}
		if got := p.States()["redis"]; got == core.BreakerClosed {
			t.Fatalf("breaker %v with Redis dead, want open", got)
		}
		srv.Restart(t)
		fromRedis(t, p.Limiter, "u")
		t.Logf("production set-up: slowest decision with Redis dead %v", slowest)
	})
}
