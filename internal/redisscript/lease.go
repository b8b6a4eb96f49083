package redisscript

import (
	"fmt"
	"strconv"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// Modes of the script that lease tokens (core.Leaser), one token bucket
// per call.
const (
	// ModeLease takes between need and size tokens from a token bucket,
	// as many as it holds, or none when it holds fewer than need.
	ModeLease = "l"
	// ModeGiveBack gives tokens back to a token bucket, never filling it
	// beyond its burst.
	ModeGiveBack = "g"
)

// LeaseArgs returns the KEYS and ARGV of a call in ModeLease (n tokens
// needed, size at most) or ModeGiveBack (n tokens given back; size is not
// sent) on the bucket whose key is key under limit l, a token bucket, at
// time now (NowArg), keeping a written key at least minTTL.
func LeaseArgs(mode string, now int64, minTTL time.Duration, key string, l *core.Limit, n, size int64) ([]string, []any) {
	call := AppendLimit(AppendCall(make([]byte, 0, CallHeaderSize+LimitSize), mode, now, ttlMillis(minTTL), 1), l)
	args := []any{string(call), strconv.FormatInt(n, 10)}
	if mode == ModeLease {
		args = append(args, strconv.FormatInt(size, 10))
	}
	return []string{key}, args
}

// Sizes of the lease calls' replies: the header, one bucket's record and,
// for ModeLease, the tokens granted (int64).
const (
	LeaseReplySize    = HeaderSize + RecordSize + 8
	GiveBackReplySize = HeaderSize + RecordSize
)

// DecodeLease decodes the reply of a ModeLease call for need tokens at
// most size: the time the script used, the bucket's state and the tokens
// granted, 0 or between need and size. Every value is checked.
func DecodeLease(reply string, need, size int64) (at time.Time, st core.BucketState, granted int64, err error) {
	if len(reply) != LeaseReplySize {
		return time.Time{}, st, 0, fmt.Errorf("%w: lease reply of %d bytes, want %d", ErrReply, len(reply), LeaseReplySize)
	}
	at, st, err = decodeOne(reply)
	if err != nil {
		return time.Time{}, st, 0, err
	}
	granted = int64(le64(reply[HeaderSize+RecordSize:]))
	if granted < 0 || granted > 0 && (granted < need || granted > size) || (granted > 0) != st.Allowed {
		return time.Time{}, st, 0, fmt.Errorf("%w: lease of %d granted for %d to %d, allowed %v", ErrReply, granted, need, size, st.Allowed)
	}
	return at, st, granted, nil
}

// DecodeGiveBack decodes the reply of a ModeGiveBack call: the time the
// script used and the bucket's state after the return.
func DecodeGiveBack(reply string) (time.Time, core.BucketState, error) {
	if len(reply) != GiveBackReplySize {
		return time.Time{}, core.BucketState{}, fmt.Errorf("%w: give-back reply of %d bytes, want %d", ErrReply, len(reply), GiveBackReplySize)
	}
	return decodeOne(reply)
}

// decodeOne decodes a reply's header and its first record.
func decodeOne(reply string) (time.Time, core.BucketState, error) {
	var st [1]core.BucketState
	c := Call{States: st[:]}
	at, err := Decode(reply[:HeaderSize+RecordSize], []*Call{&c})
	return at, st[0], err
}
