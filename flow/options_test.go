package flow

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/core"
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
	l := flowLimiter(t, nil, perUser)
	userKey := NativeKey("test", core.ScopeUser, func(s string) (string, error) { return s, nil })
	tests := []struct {
		name string
		opts []Option
		in   string // in the error; "" for none
	}{
		{"native key", []Option{userKey}, ""},
		{"native setting", []Option{userKey, Native("test", "WithDenyHandler", func() {})}, ""},
		{"another adapter's setting", []Option{userKey, Native("ginlimit", "WithDenyHandler", func() {})}, "ginlimit.WithDenyHandler is an option of ginlimit, given to test"},
		{"another adapter's key", []Option{NativeKey("fiberlimit", core.ScopeUser, func(string) (string, error) { return "", nil })}, `fiberlimit.WithKeyFunc("user") is an option of fiberlimit, given to test`},
		{"nil native key", []Option{NativeKey[string]("test", core.ScopeUser, nil)}, `test.WithKeyFunc("user"): nil key function`},
		{"nil setting", []Option{userKey, Native("test", "WithDenyHandler", nil)}, "test.WithDenyHandler: nil value"},
		{"nil function in a setting", []Option{userKey, Native("test", "WithDenyHandler", (func())(nil))}, "test.WithDenyHandler: nil value"},
		{"nil option", []Option{userKey, nil}, "test: option 1 is nil"},
		{"global native key", []Option{userKey, NativeKey("test", core.ScopeGlobal, func(s string) (string, error) { return s, nil })}, "want user, ip, endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(l, "test", nil, tc.opts...)
			if tc.in == "" {
				if err != nil {
					t.Fatalf("New = %v", err)
				}
				return
			}
			if e != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.in) {
				t.Fatalf("New = %v, %v; want ErrInvalidOption mentioning %q", e, err, tc.in)
			}
		})
	}
}

func TestNativeKeyReadsTheView(t *testing.T) {
	l := flowLimiter(t, nil, perUser)
	deny := func() {}
	e, err := New(l, "test", nil,
		NativeKey("test", core.ScopeUser, func(s string) (string, error) { return s, nil }),
		Native("test", "WithDenyHandler", deny))
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
	res := e.Check(view)
	if res.Outcome != Proceed {
		t.Fatalf("Check = %+v", res)
	}
	if res = e.Check(view); res.Outcome != Proceed {
		t.Fatalf("second Check = %+v", res)
	}
	if res = e.Check(view); res.Outcome != Denied || res.Decision.Rule != "per-user" {
		t.Fatalf("third Check = %+v, want Denied by per-user: the native key keyed alice", res)
	}
	// A view without the native request: a request error, not a panic.
	res = e.Check(keyfuncs.Static{Peer: "192.0.2.1:1"})
	if res.Outcome != Failed || res.Err == nil {
		t.Fatalf("Check without a native request = %+v, want Failed", res)
	}
}

func TestDefaultsComeFirst(t *testing.T) {
	l := flowLimiter(t, nil, perUser)
	user := WithKey(core.ScopeUser, FromContextMust(t, ctxUser{}))
	mine, err := core.NewHeaderFormat(core.WithXRateLimit(false))
	if err != nil {
		t.Fatal(err)
	}
	adapters, err := core.NewHeaderFormat(core.WithNameCase(core.NamesLower))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(l, "test", []Option{WithHeaderFormat(adapters)}, user, WithHeaderFormat(mine))
	if err != nil {
		t.Fatal(err)
	}
	if e.Format() != mine {
		t.Errorf("Format() is the adapter's default, want the caller's")
	}
	if e, err = New(l, "test", []Option{WithHeaderFormat(adapters)}, user); err != nil || e.Format() != adapters {
		t.Errorf("New without a format = %v: want the adapter's default", err)
	}
}

func TestOutcome(t *testing.T) {
	for _, tc := range []struct {
		o      Outcome
		name   string
		status int
	}{
		{Proceed, "proceed", 0},
		{Skipped, "skipped", 0},
		{Denied, "denied", http.StatusTooManyRequests},
		{Unavailable, "unavailable", http.StatusServiceUnavailable},
		{BadInput, "bad input", http.StatusBadRequest},
		{Failed, "failed", http.StatusInternalServerError},
		{ClientGone, "client gone", 0},
		{0, "Outcome(0)", 0},
	} {
		if got := tc.o.String(); got != tc.name {
			t.Errorf("Outcome(%d).String() = %q, want %q", uint8(tc.o), got, tc.name)
		}
		if got := tc.o.HTTPStatus(); got != tc.status {
			t.Errorf("%v.HTTPStatus() = %d, want %d", tc.o, got, tc.status)
		}
	}
}
