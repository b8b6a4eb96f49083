package flow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

var perUser = core.Rule{Name: "per-user", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(1), 2)}

type ctxUser struct{}

func userRequest(user string) keyfuncs.Static {
	ctx := context.Background()
	if user != "" {
		ctx = context.WithValue(ctx, ctxUser{}, user)
	}
	return keyfuncs.Static{Ctx: ctx, HTTPMethod: "GET", RouteTemplate: "/items/:id", Peer: "192.0.2.1:1234"}
}

func TestNewRejects(t *testing.T) {
	l := flowtest.LimiterWith(t, nil, perUser)
	user := FromContextMust(t, ctxUser{})
	tests := []struct {
		name string
		l    *core.Limiter
		opts []flow.Option
		in   string
	}{
		{"nil limiter", nil, []flow.Option{flow.WithKey(core.ScopeUser, user)}, "nil limiter"},
		{"rule without key function", l, nil, `rule "per-user" limits scope "user", which has no key function`},
		{"nil key function", l, []flow.Option{flow.WithKey(core.ScopeUser, nil)}, "nil key function"},
		{"global key", l, []flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithKey(core.ScopeGlobal, user)}, "want user, ip, endpoint"},
		{"unknown scope", l, []flow.Option{flow.WithKey("usr", user)}, "want user, ip, endpoint"},
		{"scope twice", l, []flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithKey(core.ScopeUser, user)}, "given twice"},
		{"nil plan", l, []flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithPlan(nil)}, "WithPlan"},
		{"nil cost", l, []flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithCost(nil)}, "WithCost"},
		{"nil skip", l, []flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithSkip(nil)}, "WithSkip"},
		{"nil format", l, []flow.Option{flow.WithKey(core.ScopeUser, user), flow.WithHeaderFormat(nil)}, "WithHeaderFormat"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := flow.New(tc.l, "test", nil, tc.opts...)
			if m != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("flow.New = %v, %v; want ErrInvalidOption mentioning %q", m, err, tc.in)
			}
		})
	}
}

func FromContextMust(t *testing.T, key any) keyfuncs.Func {
	t.Helper()
	f, err := keyfuncs.FromContext(key)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCheck(t *testing.T) {
	l := flowtest.PlanLimiter(t, core.Plans{Default: "free"}, nil,
		perUser,
		core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 3)},
		core.Rule{Name: "per-endpoint", Scope: core.ScopeEndpoint, Limit: core.TokenBucket(core.PerMinute(1), 100)},
		core.Rule{Name: "per-tenant", Scope: core.Dimension("tenant"), Limit: core.TokenBucket(core.PerMinute(1), 100)},
		core.Rule{Name: "pro-only", Scope: core.ScopeGlobal, Plan: "pro", Limit: core.TokenBucket(core.PerMinute(1), 1)},
		core.Rule{Name: "free-only", Scope: core.ScopeGlobal, Plan: "free", Limit: core.TokenBucket(core.PerMinute(1), 1000), Disabled: true},
	)
	tenant, _ := keyfuncs.Header("X-Tenant")
	m, err := flow.New(l, "test", nil,
		flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{})),
		flow.WithKey(core.Dimension("tenant"), tenant),
		flow.WithPlan(func(r keyfuncs.Request) (string, error) {
			if v := r.Values("X-Plan"); len(v) > 0 {
				return v[0], nil
			}
			return "", keyfuncs.ErrNotApplicable
		}),
		flow.WithCost(func(r keyfuncs.Request) (int64, error) {
			if len(r.Values("X-Expensive")) > 0 {
				return 2, nil
			}
			return 1, nil
		}),
		flow.WithSkip(func(r keyfuncs.Request) bool { return len(r.Values("X-Internal")) > 0 }),
	)
	if err != nil {
		t.Fatal(err)
	}
	alice := userRequest("alice")
	res := check(m, alice)
	if res.Outcome != flow.Proceed || res.Err != nil || len(res.Decision.Tiers()) != 3 {
		t.Fatalf("alice: %+v; want allowed by user, ip and endpoint tiers", res)
	}
	res = check(m, alice)
	if res.Outcome != flow.Proceed || res.Decision.Rule != "per-user" || res.Decision.Remaining != 0 {
		t.Fatalf("alice again: %+v", res.Decision)
	}
	if res = check(m, alice); res.Outcome == flow.Proceed || res.Decision.Rule != "per-user" {
		t.Fatalf("alice third: %+v, want denied by per-user", res.Decision)
	}
	// Anonymous: the per-user tier does not apply; per-ip has 1 left.
	anon := userRequest("")
	if res = check(m, anon); res.Outcome != flow.Proceed || res.Decision.Rule != "per-ip" || res.Decision.Remaining != 0 {
		t.Fatalf("anonymous: %+v, want allowed by per-ip with 0 left", res.Decision)
	}
	// Skipped requests get no decision and no headers.
	skipped := anon
	skipped.Header = map[string][]string{"X-Internal": {"1"}}
	res = check(m, skipped)
	headers := 0
	m.Headers(&res, func(string, string) { headers++ })
	if res.Outcome != flow.Skipped || headers != 0 {
		t.Fatalf("skipped: %+v, %d headers", res, headers)
	}
	// A dimension and a plan.
	pro := userRequest("bob")
	pro.Peer = "192.0.2.2:1"
	pro.Header = map[string][]string{"X-Tenant": {"acme"}, "X-Plan": {"pro"}}
	if res = check(m, pro); res.Outcome != flow.Proceed || len(res.Decision.Tiers()) != 5 {
		t.Fatalf("pro with tenant: %+v, want 5 tiers", res.Decision)
	}
	if res = check(m, pro); res.Outcome == flow.Proceed || res.Decision.Rule != "pro-only" {
		t.Fatalf("pro again: %+v, want denied by pro-only", res.Decision)
	}
	// Cost.
	exp := userRequest("carol")
	exp.Peer = "192.0.2.3:1"
	exp.Header = map[string][]string{"X-Expensive": {"1"}}
	if res = check(m, exp); res.Outcome != flow.Proceed || res.Decision.Cost != 2 || res.Decision.Remaining != 0 {
		t.Fatalf("cost 2: %+v", res.Decision)
	}
}

// TestCheckNoPlan: a request whose plan function returns
// keyfuncs.ErrNotApplicable gets the policy's default plan, or, with none,
// fails as bad input; it never skips every plan's tiers.
func TestCheckNoPlan(t *testing.T) {
	rules := []core.Rule{
		{Name: "free-only", Scope: core.ScopeGlobal, Plan: "free", Limit: core.TokenBucket(core.PerMinute(1), 1)},
		{Name: "pro-only", Scope: core.ScopeGlobal, Plan: "pro", Limit: core.TokenBucket(core.PerMinute(1), 100)},
	}
	noPlan := flow.WithPlan(func(keyfuncs.Request) (string, error) { return "", keyfuncs.ErrNotApplicable })
	m, err := flow.New(flowtest.PlanLimiter(t, core.Plans{Default: "free"}, nil, rules...), "test", nil, noPlan)
	if err != nil {
		t.Fatal(err)
	}
	if res := check(m, userRequest("")); res.Outcome != flow.Proceed || res.Decision.NumTiers() != 1 || res.Decision.Rule != "free-only" {
		t.Fatalf("no plan: %v, %d tiers, rule %q; want proceed under the default plan's free-only", res.Outcome, res.Decision.NumTiers(), res.Decision.Rule)
	}
	if res := check(m, userRequest("")); res.Outcome != flow.Denied || res.Decision.Rule != "free-only" {
		t.Fatalf("no plan again: %v by %q; want denied by free-only", res.Outcome, res.Decision.Rule)
	}
	m, err = flow.New(flowtest.PlanLimiter(t, core.Plans{RejectUnknown: true}, nil, rules...), "test", nil, noPlan)
	if err != nil {
		t.Fatal(err)
	}
	if res := check(m, userRequest("")); res.Outcome != flow.BadInput || !errors.Is(res.Err, core.ErrUnknownPlan) {
		t.Fatalf("no plan, no default: %v, %v; want bad input wrapping core.ErrUnknownPlan", res.Outcome, res.Err)
	}
}

func TestCheckErrors(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		opts []flow.Option
		req  keyfuncs.Request
		want flow.Outcome
		kind string // logged
	}{
		{"key function fails", []flow.Option{flow.WithKey(core.ScopeUser, func(keyfuncs.Request) (string, error) { return "", boom })}, userRequest("a"), flow.Failed, "key_func"},
		{"empty key", []flow.Option{flow.WithKey(core.ScopeUser, func(keyfuncs.Request) (string, error) { return "", nil })}, userRequest("a"), flow.BadInput, "invalid_input"},
		{"key too long", []flow.Option{flow.WithKey(core.ScopeUser, func(keyfuncs.Request) (string, error) { return strings.Repeat("x", core.MaxKeyLen+1), nil })}, userRequest("a"), flow.BadInput, "invalid_input"},
		{"negative cost", []flow.Option{flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{})), flow.WithCost(func(keyfuncs.Request) (int64, error) { return -1, nil })}, userRequest("a"), flow.BadInput, "invalid_input"},
		{"plan fails", []flow.Option{flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{})), flow.WithPlan(func(keyfuncs.Request) (string, error) { return "", boom })}, userRequest("a"), flow.Failed, "key_func"},
		{"no client address", []flow.Option{flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{}))}, keyfuncs.Static{Peer: "@unix"}, flow.BadInput, "invalid_input"},
		// The request's context is alive: a call of the function's own
		// that timed out or was canceled is a failure, not a client gone.
		{"key function times out", []flow.Option{flow.WithKey(core.ScopeUser, func(keyfuncs.Request) (string, error) {
			return "", fmt.Errorf("auth service: %w", context.DeadlineExceeded)
		})}, userRequest("a"), flow.Failed, "key_func"},
		{"cost function canceled", []flow.Option{flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{})), flow.WithCost(func(keyfuncs.Request) (int64, error) {
			return 0, fmt.Errorf("quota service: %w", context.Canceled)
		})}, userRequest("a"), flow.Failed, "key_func"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			// per-ip, so that the client address is needed.
			l := flowtest.LimiterWith(t, []core.Option{core.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil)))}, perUser, perIP)
			m, err := flow.New(l, "test", nil, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			res := check(m, tc.req)
			if res.Err == nil || res.Outcome != tc.want {
				t.Fatalf("Check = %+v, want %v with an error", res, tc.want)
			}
			// Logged through the limiter's logger, once; the same failure
			// again within the interval is counted, not logged.
			check(m, tc.req)
			var rec map[string]any
			if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
				t.Fatalf("want one JSON log record, got %q: %v", logs.String(), err)
			}
			wantLevel := "ERROR"
			if tc.want == flow.BadInput {
				wantLevel = "INFO"
			}
			if rec["level"] != wantLevel || rec["outcome"] != tc.want.String() || rec["kind"] != tc.kind || rec["adapter"] != "test" || rec["error"] != res.Err.Error() {
				t.Errorf("logged %v, want level %s, outcome %v, kind %s, adapter test and the error", rec, wantLevel, tc.want, tc.kind)
			}
		})
	}
}

// TestCheckContextErrors: an error wrapping a context's error is ClientGone
// only when the request's own context has ended; a limit lookup bounded by
// its own timeout fails the request (500) while the client waits.
func TestCheckContextErrors(t *testing.T) {
	lookup := core.LookupFunc(func(ctx context.Context, id string) (core.Limit, bool, error) {
		qctx, cancel := context.WithTimeout(ctx, 0) // the query's own bound, run out
		defer cancel()
		<-qctx.Done()
		return core.Limit{}, false, fmt.Errorf("tenant limits: %w", qctx.Err())
	})
	l := flowtest.Limiter(t, core.Rule{Name: "per-tenant", Scope: core.Dimension("tenant"), Lookup: lookup, Limit: core.TokenBucket(core.PerMinute(1), 10)})
	m, err := flow.New(l, "test", nil, flow.WithKey(core.Dimension("tenant"), func(keyfuncs.Request) (string, error) { return "acme", nil }))
	if err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want flow.Outcome
	}{
		{"request alive", context.Background(), flow.Failed},
		{"request canceled", canceled, flow.ClientGone},
		{"request past its deadline", expired, flow.ClientGone},
	} {
		req := userRequest("")
		req.Ctx = tc.ctx
		res := check(m, req)
		if res.Outcome != tc.want || !errors.Is(res.Err, context.DeadlineExceeded) && !errors.Is(res.Err, context.Canceled) {
			t.Errorf("%s: Check = %v, %v; want %v with the lookup's error", tc.name, res.Outcome, res.Err, tc.want)
		}
	}
}

type downStore struct{}

func (downStore) Take(context.Context, *core.Take) error { return errors.New("connection refused") }

func TestCheckFailClosed(t *testing.T) {
	l := flowtest.LimiterWith(t, []core.Option{core.WithStore(downStore{}), core.WithFailureMode(core.FailClosed)}, perUser)
	m, err := flow.New(l, "test", nil, flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{})))
	if err != nil {
		t.Fatal(err)
	}
	res := check(m, userRequest("a"))
	if res.Outcome != flow.Unavailable || res.Err != nil || res.Decision.Reason != core.ReasonUnavailable {
		t.Fatalf("Check = %+v, want a 503 denial", res)
	}
	var body bytes.Buffer
	if err := m.WriteProblem(&body, &res); err != nil {
		t.Fatal(err)
	}
	status := res.Outcome.HTTPStatus()
	var retry string
	m.Headers(&res, func(n, v string) {
		if n == "Retry-After" {
			retry = v
		}
	})
	if status != 503 || !strings.Contains(body.String(), `"status":503`) || retry != "1" {
		t.Fatalf("denial = %d %q, Retry-After %q", status, body.String(), retry)
	}
}

func TestCheckDenialAndHeaders(t *testing.T) {
	l := flowtest.LimiterWith(t, nil, perUser)
	for _, onAllow := range []bool{true, false} {
		m, err := flow.New(l, "test", nil, flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{})), flow.WithHeadersOnAllow(onAllow))
		if err != nil {
			t.Fatal(err)
		}
		user := "u" + map[bool]string{true: "1", false: "2"}[onAllow]
		var allowHeaders int
		res := check(m, userRequest(user))
		m.Headers(&res, func(string, string) { allowHeaders++ })
		if onAllow != (allowHeaders > 0) {
			t.Errorf("flow.WithHeadersOnAllow(%v): %d headers on an allowed response", onAllow, allowHeaders)
		}
		check(m, userRequest(user))
		res = check(m, userRequest(user))
		got := map[string]string{}
		m.Headers(&res, func(n, v string) { got[n] = v })
		var body bytes.Buffer
		if err := m.WriteProblem(&body, &res); err != nil {
			t.Fatal(err)
		}
		status := res.Outcome.HTTPStatus()
		if res.Outcome != flow.Denied || status != 429 || got["Retry-After"] == "" || got["X-RateLimit-Remaining"] != "0" || !strings.Contains(body.String(), `"violated-policies":["per-user"]`) {
			t.Errorf("denial: status %d headers %v body %s", status, got, body.String())
		}
	}
}

func TestCheckShapingDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := flowtest.LimiterWith(t, nil, core.Rule{Name: "queue", Scope: core.ScopeGlobal, Limit: core.Shaping(core.PerSecond(10), 1, time.Second)})
		m, err := flow.New(l, "test", nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for range 3 {
			if res := check(m, userRequest("")); res.Outcome != flow.Proceed {
				t.Fatalf("Check = %+v", res)
			}
		}
		if got := time.Since(start); got != 200*time.Millisecond {
			t.Fatalf("three shaped requests took %v, want 200ms", got)
		}
		ctx, cancel := context.WithCancel(context.Background())
		req := userRequest("")
		req.Ctx = ctx
		go func() { time.Sleep(50 * time.Millisecond); cancel() }()
		if res := check(m, req); !errors.Is(res.Err, context.Canceled) || res.Outcome != flow.ClientGone {
			t.Fatalf("canceled while delayed: %+v", res)
		}
	})
}

// check returns e's Result for r.
func check(e *flow.Engine, r keyfuncs.Request) flow.Result {
	var res flow.Result
	e.Check(r, &res)
	return res
}

// TestCheckOverwritesResult: a Result reused from request to request says
// only what the last Check decided, whatever the one before left in it.
func TestCheckOverwritesResult(t *testing.T) {
	l := flowtest.LimiterWith(t, nil, perUser)
	m, err := flow.New(l, "test", nil, flow.WithKey(core.ScopeUser, func(r keyfuncs.Request) (string, error) {
		u, _ := r.Context().Value(ctxUser{}).(string)
		switch u {
		case "fail":
			return "", errors.New("no user")
		case "":
			return "", keyfuncs.ErrNotApplicable
		}
		return u, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	var res flow.Result
	m.Check(userRequest("fail"), &res)
	if res.Outcome != flow.Failed || res.Err == nil {
		t.Fatalf("Check = %+v, want Failed with an error", res)
	}
	m.Check(userRequest("a"), &res)
	if res.Outcome != flow.Proceed || res.Err != nil || !res.Decision.Allowed || res.Decision.Remaining != 1 || res.Decision.NumTiers() != 1 {
		t.Fatalf("Check after a failure = %+v, want Proceed, no error, one tier, 1 remaining", res)
	}
	m.Check(userRequest("a"), &res)
	m.Check(userRequest("a"), &res)
	if res.Outcome != flow.Denied || res.Err != nil || res.Decision.Allowed || res.Decision.RetryAfter <= 0 {
		t.Fatalf("third Check = %+v, want Denied with a RetryAfter", res)
	}
	m.Check(userRequest(""), &res) // no user: no rule applies
	if res.Outcome != flow.Proceed || !res.Decision.Allowed || res.Decision.NumTiers() != 0 || res.Decision.RetryAfter != 0 || res.Decision.Rule != "" {
		t.Fatalf("Check of a request no rule applies to, after a denial = %+v, want Proceed with a zero decision", res)
	}
}

// TestMarkAcrossAdapters: a middleware that keeps a request's Mark on its
// framework's request (gin, Echo, fiber) reads the request's context for
// one, and marks it, only while a net/http handler exists over the
// limiter, with no allocation otherwise; a net/http handler marks the
// request it passes on once such a middleware exists, even the only
// handler over the limiter, so that the other sees it and fails the
// request with ErrInstalledTwice.
func TestMarkAcrossAdapters(t *testing.T) {
	perIP := core.Rule{Name: "per-ip", Scope: core.ScopeIP, Limit: core.TokenBucket(core.PerMinute(1), 2)}
	l := flowtest.Limiter(t, perIP)
	native, err := flow.New(l, "ginlimit", nil)
	if err != nil {
		t.Fatal(err)
	}
	native.MiddlewareMade()
	other, err := flow.New(flowtest.Limiter(t, perIP), "nethttp", nil)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	marked := r.WithContext(flow.WithMark(r.Context(), other.Mark(nil)))
	if m := native.ContextMark(marked.Context()); m != nil {
		t.Errorf("no net/http handler: ContextMark found %v, want nil: not looked for", m)
	}
	if got := native.MarkContext(r, nil); got != r {
		t.Errorf("no net/http handler: MarkContext made a copy, want the request as it came")
	}
	if n := testing.AllocsPerRun(100, func() { native.ContextMark(marked.Context()); native.MarkContext(r, nil) }); n != 0 {
		t.Errorf("no net/http handler: %v allocations, want 0", n)
	}
	handler, err := flow.New(l, "nethttp", nil)
	if err != nil {
		t.Fatal(err)
	}
	handler.HandlerMade()
	passed := handler.MarkRequest(r, nil)
	if passed == r {
		t.Fatal("a net/http handler beside a gin middleware: MarkRequest passed the request as it came, want a marked copy")
	}
	var res flow.Result
	if !native.Seen(native.ContextMark(passed.Context()), &res) || !errors.Is(res.Err, flow.ErrInstalledTwice) {
		t.Errorf("the gin middleware after the net/http handler: Seen = %v, %v; want true, ErrInstalledTwice", res.Outcome, res.Err)
	}
	inner := native.MarkContext(r, nil)
	if inner == r || !handler.Seen(flow.MarkFrom(inner.Context()), &res) || !errors.Is(res.Err, flow.ErrInstalledTwice) {
		t.Errorf("the net/http handler after the gin middleware: Seen = %v, %v; want ErrInstalledTwice", res.Outcome, res.Err)
	}
}

// TestShared: what an adapter keeps under a key is one value per limiter,
// made once, apart from another key's and another limiter's; without a
// way to make one, nothing is made.
func TestShared(t *testing.T) {
	rule := core.Rule{Name: "global", Scope: core.ScopeGlobal, Limit: core.TokenBucket(core.PerMinute(1), 10)}
	l, other := flowtest.Limiter(t, rule), flowtest.Limiter(t, rule)
	type key struct{}
	type otherKey struct{}
	made := 0
	newValue := func() any { made++; return new(int) }
	if v := flow.Shared(l, key{}, nil); v != nil {
		t.Fatalf("Shared with no value made: %v, want nil", v)
	}
	a := flow.Shared(l, key{}, newValue)
	if b := flow.Shared(l, key{}, newValue); a == nil || b != a || made != 1 {
		t.Errorf("Shared twice over one limiter: %p, %p, %d made; want one value, made once", a, b, made)
	}
	if b := flow.Shared(l, key{}, nil); b != a {
		t.Errorf("Shared with no way to make one: %p, want the value kept, %p", b, a)
	}
	if b := flow.Shared(l, otherKey{}, newValue); b == a {
		t.Error("another key shares the value")
	}
	if b := flow.Shared(other, key{}, newValue); b == a {
		t.Error("another limiter shares the value")
	}
}
