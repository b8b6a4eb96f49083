package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// opt is a store option as the adapters define theirs.
type opt interface{ apply(*Config) }

type optFunc func(*Config)

func (f optFunc) apply(c *Config) { f(c) }

func testConfig(opts ...opt) Config { return configure("test", opts, opt.apply) }

func prefixOpt(p string) opt { return optFunc(Prefix(p)) }

func clockOpt(clock core.Clock) opt { return optFunc(ClientClock(clock)) }

// nopClient is a Client that is never called: New does not touch Redis.
type nopClient struct{}

func (nopClient) Cluster() bool                              { return false }
func (nopClient) Eval(context.Context, []*Eval, bool)        {}
func (nopClient) Del(context.Context, string) error          { return nil }
func (nopClient) Slots(context.Context) ([]SlotRange, error) { return nil, nil }
func (nopClient) Ping(context.Context) error                 { return nil }

// wantInvalid fails t unless err wraps core.ErrInvalidOption and says
// "test: " then msg.
func wantInvalid(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), "test: "+msg) {
		t.Errorf("%s: New = %v, want an error wrapping core.ErrInvalidOption saying %q", what, err, "test: "+msg)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []opt
		msg  string // "": valid
	}{
		{"defaults", nil, ""},
		{"negative timeout", []opt{optFunc(Timeout(-1))}, "WithTimeout"},
		{"zero timeout", []opt{optFunc(Timeout(0))}, "WithTimeout: the timeout must be > 0"},
		{"zero breaker failures", []opt{optFunc(Breaker(0, time.Second))}, "WithBreaker: failures must be between 1"},
		{"zero breaker cooldown", []opt{optFunc(Breaker(1, 0))}, "WithBreaker: cooldown must be > 0"},
		{"negative min TTL", []opt{optFunc(MinTTL(-1))}, "WithMinTTL"},
		{"min TTL past MaxSpan", []opt{optFunc(MinTTL(core.MaxSpan + 1))}, "WithMinTTL"},
		{"empty prefix", []opt{prefixOpt("")}, "WithPrefix"},
		{"control character in prefix", []opt{prefixOpt("a\nb")}, "WithPrefix"},
		{"hashing without a secret", []opt{optFunc(HashedIdentities(nil))}, "WithHashedIdentities"},
		{"hashing with a short secret", []opt{optFunc(HashedIdentities([]byte("short")))}, "WithHashedIdentities"},
		{"no local denial keys", []opt{optFunc(LocalDenialKeys(0))}, "WithLocalDenialKeys"},
		{"nil option", []opt{prefixOpt("p"), nil}, "option 1 is nil"},
		{"nil clock", []opt{clockOpt(nil)}, "WithClientClock: nil clock"},
		{"typed nil clock", []opt{clockOpt((*core.ManualClock)(nil))}, "WithClientClock: nil clock"},
	} {
		s, err := newStore(nopClient{}, testConfig(tc.opts...))
		if tc.msg == "" {
			if err != nil || s == nil {
				t.Errorf("%s: New = %v, %v", tc.name, s, err)
			}
			continue
		}
		if s != nil {
			t.Errorf("%s: New returned a store with its error", tc.name)
		}
		wantInvalid(t, tc.name, err, tc.msg)
	}
}

// TestSecretCopied: a caller that wipes its secret once the option is made,
// or once the store is, changes no bucket's key.
func TestSecretCopied(t *testing.T) {
	secret := []byte("0123456789abcdef")
	o := optFunc(HashedIdentities(secret))
	s1, err := newStore(nopClient{}, testConfig(o))
	if err != nil {
		t.Fatal(err)
	}
	want := s1.Key("per-ip", "192.0.2.1")
	clear(secret)
	s2, err := newStore(nopClient{}, testConfig(o))
	if err != nil {
		t.Fatal(err)
	}
	if got := s1.Key("per-ip", "192.0.2.1"); got != want {
		t.Errorf("the store's key changed with the caller's secret: %s, was %s", got, want)
	}
	if got := s2.Key("per-ip", "192.0.2.1"); got != want {
		t.Errorf("a store made later from the option has key %s, want %s", got, want)
	}
}

// TestConfigErrorsJoined: every problem is reported, not just the first.
func TestConfigErrorsJoined(t *testing.T) {
	_, err := newStore(nil, testConfig(nil, prefixOpt(""), clockOpt(nil)))
	for _, msg := range []string{"option 0 is nil", "WithPrefix", "WithClientClock", "nil client"} {
		wantInvalid(t, msg, err, msg)
	}
}

func TestNilClient(t *testing.T) {
	_, err := newStore(nil, testConfig())
	wantInvalid(t, "nil client", err, "nil client")
}

func TestIsNil(t *testing.T) {
	var fn func()
	var clock *core.ManualClock
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{nil, true}, {fn, true}, {clock, true}, {[]byte(nil), true},
		{0, false}, {"", false}, {core.NewManualClock(time.Unix(0, 0)), false}, {nopClient{}, false},
	} {
		if got := IsNil(tc.v); got != tc.want {
			t.Errorf("IsNil(%#v) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// TestOpen: conn is not called for a nil client, typed or not, and the
// problems it reports join the others.
func TestOpen(t *testing.T) {
	conn := func(c *nopClient, cfg *Config) Client {
		if c == nil {
			t.Fatal("conn called for a nil client")
		}
		return c
	}
	_, err := Open("test", (*nopClient)(nil), conn, []opt{prefixOpt("p")}, opt.apply)
	wantInvalid(t, "typed nil client", err, "nil client")
	_, err = Open("test", &nopClient{}, func(c *nopClient, cfg *Config) Client {
		cfg.Fail("the client says no")
		return c
	}, []opt{nil}, opt.apply)
	wantInvalid(t, "conn's problem", err, "the client says no")
	wantInvalid(t, "nil option", err, "option 0 is nil")
	s, err := Open("test", &nopClient{}, conn, []opt{prefixOpt("p")}, opt.apply)
	if err != nil || s.Key("r", "id") != "p:r:id" {
		t.Fatalf("Open = %v, %v; want a store keying under p", s, err)
	}
}

func TestCheckAddr(t *testing.T) {
	for a, ok := range map[string]bool{
		"127.0.0.1:6379": true, "redis.internal:6380": true, "[::1]:6379": true,
		"": false, "localhost": false, ":6379": false, "host:0": false, "host:65536": false, "host:port": false,
	} {
		if err := CheckAddr(a); (err == nil) != ok {
			t.Errorf("CheckAddr(%q) = %v, want ok %v", a, err, ok)
		}
	}
}
