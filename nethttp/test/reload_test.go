package nethttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/keyfuncs"
	"github.com/bucketry/ratelimit/nethttp"
)

// TestSetPolicyThroughMiddleware: with a Middleware on the limiter, a
// reload adding a rule on a scope the Middleware has no key function for
// is refused, naming the rule, the scope and the adapter, and the served
// requests keep the policy in force; a reload it can key takes effect.
func TestSetPolicyThroughMiddleware(t *testing.T) {
	perUser := core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 1)}
	perTenant := core.Rule{Name: "per-tenant", Scope: core.Dimension("tenant"), Limit: core.TokenBucket(core.PerMinute(1), 1)}
	perIP := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 1)}
	policy := func(rules ...core.Rule) *core.Policy {
		t.Helper()
		p, err := core.NewPolicy(rules...)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	l, err := core.NewLimiter(policy(perUser))
	if err != nil {
		t.Fatal(err)
	}
	m, err := nethttp.New(l, nethttp.WithKeyFunc(core.ScopeUser, func(r *http.Request) (string, error) {
		if v := r.Header.Get("X-User"); v != "" {
			return v, nil
		}
		return "", keyfuncs.ErrNotApplicable
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	})))
	t.Cleanup(srv.Close)
	get := func(user string) int {
		t.Helper()
		req, err := http.NewRequest("GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User", user)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}

	old := l.Policy()
	err = l.SetPolicy(policy(perUser, perTenant))
	if !errors.Is(err, core.ErrInvalidOption) {
		t.Fatalf("SetPolicy(+per-tenant) = %v, want an error wrapping core.ErrInvalidOption", err)
	}
	for _, want := range []string{`rule "per-tenant"`, `scope "dim:tenant"`, "nethttp:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("SetPolicy(+per-tenant) = %q, want it to say %s", err, want)
		}
	}
	if l.Policy() != old {
		t.Fatal("a refused SetPolicy replaced the policy in force")
	}
	if got := get("alice"); got != http.StatusOK {
		t.Fatalf("first GET as alice = %d, want 200", got)
	}
	if got := get("alice"); got != http.StatusTooManyRequests {
		t.Fatalf("second GET as alice = %d, want 429 from per-user, still in force", got)
	}

	// A rule the Middleware can key: the peer address.
	if err := l.SetPolicy(policy(perIP)); err != nil {
		t.Fatalf("SetPolicy(per-ip) = %v, want nil", err)
	}
	if got := get("bob"); got != http.StatusOK {
		t.Fatalf("first GET as bob after the reload = %d, want 200", got)
	}
	if got := get("carol"); got != http.StatusTooManyRequests {
		t.Fatalf("GET as carol from the same address = %d, want 429 from per-ip", got)
	}
}
