package flow_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/flow"
	"github.com/bucketry/ratelimit/flow/flowtest"
	"github.com/bucketry/ratelimit/keyfuncs"
)

// nativeView is a request view whose native request is a string, as an
// adapter's view returns its framework's request.
type nativeView struct {
	keyfuncs.Static
	native string
}

func (v nativeView) Native() string { return v.native }

func TestNativeOptions(t *testing.T) {
	l := flowtest.LimiterWith(t, nil, perUser)
	userKey := flow.NativeKey("test", core.ScopeUser, func(s string) (string, error) { return s, nil })
	tests := []struct {
		name string
		opts []flow.Option
		in   string // in the error; "" for none
	}{
		{"native key", []flow.Option{userKey}, ""},
		{"native setting", []flow.Option{userKey, flow.Native("test", "WithDenyHandler", func() {})}, ""},
		{"another adapter's setting", []flow.Option{userKey, flow.Native("ginlimit", "WithDenyHandler", func() {})}, "ginlimit.WithDenyHandler is an option of ginlimit, given to test"},
		{"another adapter's key", []flow.Option{flow.NativeKey("fiberlimit", core.ScopeUser, func(string) (string, error) { return "", nil })}, `fiberlimit.WithKeyFunc("user") is an option of fiberlimit, given to test`},
		{"nil native key", []flow.Option{flow.NativeKey[string]("test", core.ScopeUser, nil)}, `test.WithKeyFunc("user"): nil key function`},
		{"nil setting", []flow.Option{userKey, flow.Native("test", "WithDenyHandler", nil)}, "test.WithDenyHandler: nil value"},
		{"nil function in a setting", []flow.Option{userKey, flow.Native("test", "WithDenyHandler", (func())(nil))}, "test.WithDenyHandler: nil value"},
		{"nil option", []flow.Option{userKey, nil}, "test: option 1 is nil"},
		{"global native key", []flow.Option{userKey, flow.NativeKey("test", core.ScopeGlobal, func(s string) (string, error) { return s, nil })}, "want user, ip, endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := flow.New(l, "test", nil, tc.opts...)
			if tc.in == "" {
				if err != nil {
					t.Fatalf("flow.New = %v", err)
				}
				return
			}
			if e != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("flow.New = %v, %v; want ErrInvalidOption mentioning %q", e, err, tc.in)
			}
		})
	}
}

func TestNativeKeyReadsTheView(t *testing.T) {
	l := flowtest.LimiterWith(t, nil, perUser)
	deny := func() {}
	e, err := flow.New(l, "test", nil,
		flow.NativeKey("test", core.ScopeUser, func(s string) (string, error) { return s, nil }),
		flow.Native("test", "WithDenyHandler", deny))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Native("WithDenyHandler").(func()); !ok {
		t.Errorf("Native(WithDenyHandler) = %T, want the func() given", e.Native("WithDenyHandler"))
	}
	if v := e.Native("WithErrorHandler"); v != nil {
		t.Errorf("Native(WithErrorHandler) = %v, want nil: never given", v)
	}
	view := nativeView{Static: keyfuncs.Static{Peer: "192.0.2.1:1"}, native: "alice"}
	res := check(e, view)
	if res.Outcome != flow.Proceed {
		t.Fatalf("Check = %+v", res)
	}
	if res = check(e, view); res.Outcome != flow.Proceed {
		t.Fatalf("second Check = %+v", res)
	}
	if res = check(e, view); res.Outcome != flow.Denied || res.Decision.Rule != "per-user" {
		t.Fatalf("third Check = %+v, want Denied by per-user: the native key keyed alice", res)
	}
	// A view without the native request: a request error, not a panic.
	res = check(e, keyfuncs.Static{Peer: "192.0.2.1:1"})
	if res.Outcome != flow.Failed || res.Err == nil {
		t.Fatalf("Check without a native request = %+v, want Failed", res)
	}
}

func TestDefaultsComeFirst(t *testing.T) {
	l := flowtest.LimiterWith(t, nil, perUser)
	user := flow.WithKey(core.ScopeUser, FromContextMust(t, ctxUser{}))
	mine, err := core.NewHeaderFormat(core.WithXRateLimit(false))
	if err != nil {
		t.Fatal(err)
	}
	adapters, err := core.NewHeaderFormat(core.WithNameCase(core.NamesLower))
	if err != nil {
		t.Fatal(err)
	}
	e, err := flow.New(l, "test", []flow.Option{flow.WithHeaderFormat(adapters)}, user, flow.WithHeaderFormat(mine))
	if err != nil {
		t.Fatal(err)
	}
	if e.Format() != mine {
		t.Errorf("Format() is the adapter's default, want the caller's")
	}
	if e, err = flow.New(l, "test", []flow.Option{flow.WithHeaderFormat(adapters)}, user); err != nil || e.Format() != adapters {
		t.Errorf("flow.New without a format = %v: want the adapter's default", err)
	}
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		o      flow.Outcome
		name   string
		status int
	}{
		{flow.Proceed, "proceed", 0},
		{flow.Skipped, "skipped", 0},
		{flow.Denied, "denied", http.StatusTooManyRequests},
		{flow.Unavailable, "unavailable", http.StatusServiceUnavailable},
		{flow.BadInput, "bad input", http.StatusBadRequest},
		{flow.Failed, "failed", http.StatusInternalServerError},
		{flow.ClientGone, "client gone", 0},
		{0, "Outcome(0)", 0},
	} {
		if got := tc.o.String(); got != tc.name {
			t.Errorf("flow.Outcome(%d).String() = %q, want %q", uint8(tc.o), got, tc.name)
		}
		if got := tc.o.HTTPStatus(); got != tc.status {
			t.Errorf("%v.HTTPStatus() = %d, want %d", tc.o, got, tc.status)
		}
	}
}
