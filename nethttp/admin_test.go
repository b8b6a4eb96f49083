package nethttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/nethttp"
)

type tierJSON struct {
	Rule       string  `json:"rule"`
	Scope      string  `json:"scope"`
	Limit      string  `json:"limit"`
	Remaining  int64   `json:"remaining"`
	ResetAfter float64 `json:"reset_after_seconds"`
	Shadow     bool    `json:"shadow"`
}

// noResetStore is a store that cannot reset buckets.
type noResetStore struct{ core.Store }

func TestAdmin(t *testing.T) {
	p, err := core.NewPolicy(
		core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1), 3)},
		core.Rule{Name: "per-tenant", Scope: core.Dimension("tenant"), Limit: core.TokenBucket(core.PerHour(1), 5), Shadow: true},
	)
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLimiter(p)
	if err != nil {
		t.Fatal(err)
	}
	req := core.Request{User: "alice", Dims: []core.Dim{{Name: "tenant", Value: "acme"}}}
	for range 2 {
		l.Allow(context.Background(), req)
	}
	admin, err := nethttp.NewAdmin(l)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin)
	defer srv.Close()
	const query = "/?user=alice&dim.tenant=acme"
	inspect := func() []tierJSON {
		t.Helper()
		resp, err := http.Get(srv.URL + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Tiers []tierJSON }
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d, %v", query, resp.StatusCode, err)
		}
		return out.Tiers
	}
	// Inspecting twice consumes nothing.
	for range 2 {
		got := inspect()
		if len(got) != 2 || got[0].Rule != "per-user" || got[0].Remaining != 1 || got[1].Remaining != 3 || !got[1].Shadow || got[0].ResetAfter <= 7100 || got[0].ResetAfter > 7200 {
			t.Fatalf("GET: %+v, want per-user 1 left (reset within 7200 s) and shadow per-tenant 3 left", got)
		}
	}
	do := func(method, target string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, srv.URL+target, nil)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	if code, _ := do(http.MethodDelete, query); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d, want 204", code)
	}
	if got := inspect(); got[0].Remaining != 3 || got[1].Remaining != 5 {
		t.Fatalf("after DELETE: %+v, want full buckets", got)
	}
	if code, body := do(http.MethodGet, "/?user=a%00b"); code != http.StatusBadRequest || !strings.Contains(body, "invalid key") {
		t.Errorf("GET of a bad identity: %d %q, want 400 naming the invalid key", code, body)
	}
	if code, _ := do(http.MethodPut, query); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d, want 405", code)
	}
	other, err := core.NewLimiter(p, core.WithStore(noResetStore{newMemoryStore(t)}))
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := nethttp.NewAdmin(other)
	rec := httptest.NewRecorder()
	a2.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, query, nil))
	if rec.Code != http.StatusNotImplemented {
		t.Errorf("reset on a store that cannot: %d, want 501", rec.Code)
	}
	if _, err := nethttp.NewAdmin(nil); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("NewAdmin(nil) = %v, want ErrInvalidOption", err)
	}
}

// newMemoryStore returns an empty memory store.
func newMemoryStore(t *testing.T) *core.MemoryStore {
	m, err := core.NewMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
