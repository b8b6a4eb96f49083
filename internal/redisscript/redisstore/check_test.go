package redisstore

import (
	"errors"
	"testing"

	"github.com/bucketry/ratelimit/internal/redisscript"
)

// TestCheck: a reply's error, and undo values that do not match the call,
// are errors; client errors say "redis", malformed replies wrap ErrReply.
func TestCheck(t *testing.T) {
	boom := errors.New("ERR boom")
	malformed := errors.Join(redisscript.ErrReply, errors.New("not an array"))
	for _, tc := range []struct {
		name    string
		e       Eval
		buckets int // undo values expected for: 0 for none
		reply   bool
		ok      bool
	}{
		{"a reply", Eval{Reply: "r"}, 0, false, true},
		{"client error", Eval{Err: boom}, 0, false, false},
		{"malformed", Eval{Err: malformed}, 0, true, false},
		{"undo where none is due", Eval{Reply: "r", Undo: []string{"a", "b"}}, 0, true, false},
		{"no undo in a take with undo", Eval{Reply: "r"}, 1, true, false},
		{"undo of the wrong length", Eval{Reply: "r", Undo: []string{"a"}}, 1, true, false},
		{"undo", Eval{Reply: "r", Undo: []string{"a", "b", "c", "d"}}, 2, false, true},
	} {
		err := check(&tc.e, tc.buckets)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s: check = %v, want nil", tc.name, err)
		case !tc.ok && err == nil:
			t.Errorf("%s: check = nil, want an error", tc.name)
		case !tc.ok && errors.Is(err, redisscript.ErrReply) != tc.reply:
			t.Errorf("%s: check = %v, wrapping ErrReply %v, want %v", tc.name, err, !tc.reply, tc.reply)
		case tc.e.Err == boom && !errors.Is(err, boom):
			t.Errorf("%s: check = %v, want it to wrap the client's error", tc.name, err)
		}
	}
}
