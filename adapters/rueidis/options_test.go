package rueidis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	rstore "github.com/bucketry/ratelimit/adapters/rueidis"
	"github.com/bucketry/ratelimit/core"
)

// stub is a rueidis.Client that New can take without a server: New asks it
// only for its Mode. Calling anything else panics.
type stub struct{ rueidis.Client }

func (stub) Mode() rueidis.ClientMode { return rueidis.ClientModeStandalone }

func TestNewOptions(t *testing.T) {
	var c rueidis.Client = stub{}
	for _, tc := range []struct {
		name   string
		client rueidis.Client
		opts   []rstore.Option
		want   string // in the error
	}{
		{"nil client", nil, nil, "rueidis: nil client"},
		{"typed nil client", (*stub)(nil), nil, "rueidis: nil client"},
		{"nil option", c, []rstore.Option{rstore.WithPrefix("p"), nil}, "rueidis: option 1 is nil"},
		{"nil options", c, []rstore.Option{nil, nil}, "rueidis: option 1 is nil"},
		{"every problem", nil, []rstore.Option{nil, rstore.WithPrefix(""), rstore.WithClientClock(nil)}, "option 0 is nil"},
		{"nil clock", c, []rstore.Option{rstore.WithClientClock(nil)}, "rueidis: WithClientClock: nil clock"},
		{"typed nil clock", c, []rstore.Option{rstore.WithClientClock((*core.ManualClock)(nil))}, "rueidis: WithClientClock: nil clock"},
		{"empty prefix", c, []rstore.Option{rstore.WithPrefix("")}, "WithPrefix"},
		{"control character in prefix", c, []rstore.Option{rstore.WithPrefix("a\nb")}, "WithPrefix"},
		{"short secret", c, []rstore.Option{rstore.WithHashedIdentities([]byte("short"))}, "WithHashedIdentities"},
		{"nil secret", c, []rstore.Option{rstore.WithHashedIdentities(nil)}, "WithHashedIdentities"},
		{"negative timeout", c, []rstore.Option{rstore.WithTimeout(-time.Second)}, "WithTimeout"},
		{"zero timeout", c, []rstore.Option{rstore.WithTimeout(0)}, "WithTimeout: the timeout must be > 0"},
		{"zero breaker failures", c, []rstore.Option{rstore.WithBreaker(0, time.Second)}, "WithBreaker: failures"},
		{"negative min TTL", c, []rstore.Option{rstore.WithMinTTL(-time.Millisecond)}, "WithMinTTL"},
		{"min TTL above MaxSpan", c, []rstore.Option{rstore.WithMinTTL(core.MaxSpan + time.Millisecond)}, "WithMinTTL"},
		{"no local denial keys", c, []rstore.Option{rstore.WithLocalDenialKeys(0)}, "WithLocalDenialKeys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := rstore.New(tc.client, tc.opts...)
			if s != nil || !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error wrapping core.ErrInvalidOption saying %q", s, err, tc.want)
			}
		})
	}
	st, err := rstore.New(c, rstore.WithHashedIdentities([]byte("0123456789abcdef")), rstore.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if k := st.Key("r", "alice"); strings.Contains(k, "alice") || !strings.HasPrefix(k, "ratelimit:r:#") {
		t.Fatalf("Key = %q, want a hashed identity under the default prefix", k)
	}
}
