package pglimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pglimit "github.com/bucketry/ratelimit/adapters/postgres"
	"github.com/bucketry/ratelimit/core"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestInvalidOptions checks NewSource's and Migrate's argument errors. The
// pool is for a port nothing listens on: the arguments are checked before
// anything connects, so a valid pool that cannot connect still gets the
// argument's error, not a connection's.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	empty, err := core.NewPolicy()
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.NewLimiter(empty)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pool *pgxpool.Pool
		l    *core.Limiter
		opts []pglimit.Option
		want string
	}{
		{"nil pool", nil, l, nil, "pglimit: NewSource: pool is nil"},
		{"nil limiter", pool, nil, nil, "pglimit: NewSource: limiter is nil"},
		{"nil option", pool, l, []pglimit.Option{nil}, "pglimit: NewSource: option 0 is nil"},
		{"zero interval", pool, l, []pglimit.Option{pglimit.WithInterval(0)}, "pglimit: WithInterval: must be > 0, got 0s"},
		{"negative timeout", pool, l, []pglimit.Option{pglimit.WithTimeout(-time.Second)}, "pglimit: WithTimeout: must be > 0, got -1s"},
		{"backoff", pool, l, []pglimit.Option{pglimit.WithReconnectBackoff(time.Second, time.Millisecond)}, "pglimit: WithReconnectBackoff: need 0 < minimum <= maximum, got 1s, 1ms"},
		{"nil logger", pool, l, []pglimit.Option{pglimit.WithLogger(nil)}, "pglimit: WithLogger: nil logger"},
		{"empty file", pool, l, []pglimit.Option{pglimit.WithFallbackFile("")}, "pglimit: WithFallbackFile: empty path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := pglimit.NewSource(context.Background(), tc.pool, tc.l, tc.opts...)
			if err == nil {
				s.Close()
				t.Fatal("NewSource = nil error")
			}
			if !errors.Is(err, core.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSource error = %q, want ErrInvalidOption with %q", err, tc.want)
			}
		})
	}
	if err := pglimit.Migrate(context.Background(), nil); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("Migrate(nil) = %v, want ErrInvalidOption", err)
	}
}
