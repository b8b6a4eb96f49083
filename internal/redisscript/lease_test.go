package redisscript

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

func TestLeaseArgs(t *testing.T) {
	lim := &testLimits(t)[0].Limit
	for _, tc := range []struct {
		name       string
		mode       string
		minTTL     time.Duration
		n, size    int64
		wantTail   []string // ARGV[2…]
		wantMinTTL string
	}{
		{"lease", ModeLease, 0, 3, 40, []string{"3", "40"}, "0"},
		{"give_back", ModeGiveBack, 1500 * time.Microsecond, 7, 0, []string{"7"}, "2"},
	} {
		keys, args := LeaseArgs(tc.mode, 123, tc.minTTL, "rl:a:*", lim, tc.n, tc.size)
		if len(keys) != 1 || keys[0] != "rl:a:*" {
			t.Errorf("%s: KEYS = %q, want [rl:a:*]", tc.name, keys)
		}
		got := parseCall(t, args)
		if got.now != "123" || got.mode != tc.mode || got.minTTL != tc.wantMinTTL || len(got.reqs) != 0 ||
			len(got.limits) != 1 || string(AppendLimit(nil, lim)) != args[0].(string)[CallHeaderSize:] {
			t.Errorf("%s: ARGV[1] = %+v, want time 123, mode %q, min TTL %s, the limit and no request", tc.name, got, tc.mode, tc.wantMinTTL)
		}
		if strings.Join(got.refunds, ",") != strings.Join(tc.wantTail, ",") {
			t.Errorf("%s: ARGV[2…] = %q, want %q", tc.name, got.refunds, tc.wantTail)
		}
	}
}

func TestDecodeLease(t *testing.T) {
	at := time.Unix(1767225600, 5)
	granted := func(reply []byte, g int64) string { return string(binary.LittleEndian.AppendUint64(reply, uint64(g))) }
	allowed := AppendReply(nil, at, core.BucketState{Allowed: true, Remaining: 10, ResetAfter: time.Second})
	denied := AppendReply(nil, at, core.BucketState{Reason: core.ReasonLimited, ResetAfter: time.Second, RetryAfter: time.Millisecond})
	gotAt, st, g, err := DecodeLease(granted(allowed, 5), 2, 8)
	if err != nil || !gotAt.Equal(at) || g != 5 || !st.Allowed || st.Remaining != 10 {
		t.Fatalf("DecodeLease(granted 5) = %v, %+v, %d, %v", gotAt, st, g, err)
	}
	if _, st, g, err := DecodeLease(granted(denied, 0), 2, 8); err != nil || g != 0 || st.Allowed || st.RetryAfter != time.Millisecond {
		t.Fatalf("DecodeLease(denied) = %+v, %d, %v", st, g, err)
	}
	for name, reply := range map[string]string{
		"short":            string(allowed),
		"below_need":       granted(allowed, 1),
		"above_size":       granted(allowed, 9),
		"negative":         granted(allowed, -1),
		"allowed_nothing":  granted(allowed, 0),
		"denied_something": granted(denied, 3),
	} {
		if _, _, _, err := DecodeLease(reply, 2, 8); !errors.Is(err, ErrReply) {
			t.Errorf("%s: DecodeLease error = %v, want ErrReply", name, err)
		}
	}
	if _, st, err := DecodeGiveBack(string(allowed)); err != nil || st.Remaining != 10 {
		t.Fatalf("DecodeGiveBack = %+v, %v", st, err)
	}
	if _, _, err := DecodeGiveBack(string(allowed) + "x"); !errors.Is(err, ErrReply) {
		t.Fatalf("DecodeGiveBack(long) error = %v, want ErrReply", err)
	}
}
