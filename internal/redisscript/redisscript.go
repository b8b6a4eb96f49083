// Package redisscript is the script of the Redis stores: the Lua script
// that decides a request against several buckets in one call, how bucket
// keys are named, how arguments are encoded and replies decoded, how
// buckets are grouped by Redis Cluster hash slot, and the batching of
// requests into script calls. The store built on it, which the go-redis
// and rueidis stores share, is package redisstore. It imports no Redis
// client, so each store brings only its own.
//
// # One call, many requests
//
// A script call carries the requests of one batch (see Batcher), decided in
// order. Each distinct key is read once (GET, or all at once with MGET)
// and written once (SET with PX), at the end of the call, whatever the
// number of requests on it: the script keeps each bucket's state in a Lua
// table meanwhile, and every request decides on the state the requests
// before it left, exactly as if each had read and written Redis itself. A denied request changes nothing.
// Each distinct limit is sent once per call, and requests refer to their
// keys and limits by index. Arguments and the reply are binary: one
// argument holds the call's header (mode, time, least time to live), the
// limits and the requests, in little-endian doubles and integers (see
// Builder), and the reply is one string holding the time the script used
// and, per bucket, a code byte and three int64 (see Decode); nothing on
// either side parses or formats decimal numbers, and decoding a reply
// allocates nothing. One argument and a bare string reply are the cheapest
// shapes for Redis: it makes a Lua string and grows the ARGV table for
// every argument, and turns an array reply into a reply element by
// element.
//
// Identical requests in one call (a hot key's, or a hot set of tiers')
// travel as one request with a count, a run, decided one after the other
// at the place of the first (see Builder.Add). On token buckets and shaping
// limits the fast path below decides a run at once, and answers it with one
// record per bucket from which the client derives each request's states
// (Builder.Decode): a run costs the script about what one request costs.
//
// The script opens with a fast path for the common call, a take on token
// buckets and shaping limits of at most 100 days: a small function that
// decides it, with undo values when asked, as the rest of the script would
// and returns, so that the rest (other algorithms, refunds, leases,
// rescaling after a limit change) is not even defined for it. It hands
// over, having written nothing, whatever it does not decide itself. What
// it allocates (tables, closures, strings), and the garbage collection
// that follows, is much of what a call costs Redis beyond its commands: it
// keeps that to a few tables made at their size.
//
// # What a key holds
//
// A bucket's key holds a binary value: a tag byte, the algorithm (1 token
// bucket, 2 shaping, 3 fixed window, 4 sliding window, 5 sliding log), then
// little-endian integers:
//
//	token bucket, shaping  TAT seconds int64, TAT nanoseconds int32, fill time ns int64 (21 bytes)
//	fixed window           start seconds int64, start ns int32, count int64, window ns int64 (29 bytes)
//	sliding window         start seconds int64, start ns int32, current count int64, previous count int64, window ns int64 (37 bytes)
//	sliding log            window ns int64, then per admitted instant seconds int64, ns int32, cost int64 (9 + 20n bytes)
//
// These are core.State's fields. Times are Unix (seconds, nanoseconds)
// pairs because Lua numbers are doubles: a Unix time in nanoseconds
// (about 2^60) does not fit in 53 bits, while each half does, and the
// script only ever forms differences, which do (see take.lua for the
// precision argument). So every store keeps nanosecond resolution, and
// limits longer than 100 days decide in whole microseconds as core does.
// The fill time or window records the limit the value was written under
// (core.State.Span), so that a changed limit rescales a token bucket's debt
// and restarts a window of another length, as the memory store does. A value
// of another algorithm, or that is not in this format, counts as absent (a
// full bucket), as the memory store starts afresh under another algorithm.
//
// A key expires (PX) when its bucket is equivalent to a new one again: a
// token bucket when its TAT, rounded up to the microsecond, has passed; a
// window or log when its last counted window or entry has left, each
// rounded up to the millisecond PX expresses, and never before the
// store's least TTL (WithMinTTL). A longer life never changes a decision:
// the value says when the bucket is full. So Redis holds at most one small
// value per active bucket and nothing for idle ones.
package redisscript

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bucketry/ratelimit/core"
)

//go:embed take.lua
var source string

// Source is the Lua text of the script.
func Source() string { return source }

var sha = func() string {
	sum := sha1.Sum([]byte(source))
	return hex.EncodeToString(sum[:])
}()

// SHA returns the script's SHA-1, as EVALSHA takes it.
func SHA() string { return sha }

// Modes of the script.
const (
	// ModeTake takes.
	ModeTake = "t"
	// ModeTakeUndo takes and also returns, as the reply's last element, an
	// array of two strings per bucket: its value before the take and the
	// value the take wrote ("" for none). See Undo.
	ModeTakeUndo = "u"
	// ModeRefund gives back what a ModeTakeUndo take consumed (AddRefund).
	ModeRefund = "r"
)

// ErrReply is wrapped by every error about a malformed reply.
var ErrReply = errors.New("ratelimit: malformed reply from redis")

// Keys names bucket keys: prefix ":" rule ":" identity. The identity is
// escaped so that user text cannot hold a Cluster hash tag ({ and }) nor
// forge another key; identities longer than MaxRawIdentity bytes, or all
// identities when a secret is set, are replaced by a keyed hash.
type Keys struct {
	prefix string
	secret []byte // nil: only long identities are hashed, with plain SHA-256
	hashed bool   // hash every identity
}

// MaxRawIdentity is the longest identity kept readable in a key.
const MaxRawIdentity = 128

// NewKeys returns a key namer. prefix must be non-empty. With hashAll, every
// identity is replaced by HMAC-SHA-256(secret, identity), so raw user ids and
// addresses never reach Redis; secret must then be at least 16 bytes (a plain
// hash of an IPv4 address is reversed by trying all 2^32). It keeps a copy
// of secret.
func NewKeys(prefix string, hashAll bool, secret []byte) (*Keys, error) {
	if prefix == "" {
		return nil, fmt.Errorf("%w: key prefix must not be empty", core.ErrInvalidOption)
	}
	if err := core.CheckKey(prefix); err != nil {
		return nil, fmt.Errorf("%w: key prefix: %w", core.ErrInvalidOption, err)
	}
	if hashAll && len(secret) < 16 {
		return nil, fmt.Errorf("%w: hashing identities needs a secret of at least 16 bytes, got %d", core.ErrInvalidOption, len(secret))
	}
	return &Keys{prefix: prefix, secret: bytes.Clone(secret), hashed: hashAll}, nil
}

// Prefix returns the key prefix.
func (k *Keys) Prefix() string { return k.prefix }

// Append appends the key of bucket (rule, id) to dst.
func (k *Keys) Append(dst []byte, rule, id string) []byte {
	dst = append(dst, k.prefix...)
	dst = append(dst, ':')
	dst = append(dst, rule...)
	dst = append(dst, ':')
	if k.hashed || len(id) > MaxRawIdentity {
		// '#' is escaped in raw identities, so a hashed one cannot collide
		// with one.
		var sum []byte
		if k.secret != nil {
			m := hmac.New(sha256.New, k.secret)
			m.Write([]byte(id))
			sum = m.Sum(nil)
		} else {
			s := sha256.Sum256([]byte(id))
			sum = s[:]
		}
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum)
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; c {
		case '%', '{', '}', '#':
			dst = append(dst, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// Key returns the key of bucket (rule, id).
func (k *Keys) Key(rule, id string) string {
	var arr [160]byte
	return string(k.Append(arr[:0], rule, id))
}

// algCode returns the script's code of l's algorithm: 1 to 5, plus 5 for a
// limit that decides at microsecond resolution (longer than 100 days), so
// that the script knows without another argument per bucket; 0 for none.
func algCode(l *core.Limit) int {
	var c int
	switch l.Algorithm() {
	case core.AlgTokenBucket:
		c = 1
	case core.AlgShaping:
		c = 2
	case core.AlgFixedWindow:
		c = 3
	case core.AlgSlidingWindow:
		c = 4
	case core.AlgSlidingLog:
		c = 5
	default:
		return 0
	}
	if l.Resolution() == time.Microsecond {
		c += 5
	}
	return c
}

// LimitSize is the size in bytes of one limit in the script's call
// argument: five float64.
const LimitSize = 40

// CallHeaderSize is the size in bytes of the header that opens the
// script's call argument: the mode (a byte), the time in Unix seconds
// (int64; -1 for the server's clock) and nanoseconds (uint32), the least
// time to live of a written key in ms (int64) and the number of limits
// (uint32), little-endian. The limits follow, then the requests.
const CallHeaderSize = 25

// AppendCall appends the header of a call (see CallHeaderSize) in mode at
// time now (see NowArg) with keys written to live at least minTTLms and
// nlimits limits. A time before the Unix epoch is sent as -2 seconds,
// which the script refuses.
func AppendCall(dst []byte, mode string, now, minTTLms int64, nlimits int) []byte {
	var m byte
	if mode != "" {
		m = mode[0]
	}
	sec, nsec := int64(-1), int64(0)
	switch {
	case now == ServerClock:
	case now < 0:
		sec = -2
	default:
		sec, nsec = now/1e9, now%1e9
	}
	dst = append(dst, m)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(sec))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(nsec))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(minTTLms))
	return binary.LittleEndian.AppendUint32(dst, uint32(nlimits))
}

// ttlMillis is d rounded up to the millisecond.
func ttlMillis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// AppendLimit appends the script's description of l to dst: its algorithm
// code (see algCode) and four numbers (see take.lua), each a little-endian
// float64. Every one is an integer a double holds exactly: durations at
// nanosecond resolution stay below 2^53 ns (100 days), those at microsecond
// resolution are whole microseconds below 2^56, and a burst is at most a
// fill time over a whole interval.
func AppendLimit(dst []byte, l *core.Limit) []byte {
	var v [5]int64
	v[0] = int64(algCode(l))
	switch l.Algorithm() {
	case core.AlgTokenBucket, core.AlgShaping:
		v[1], v[2], v[3], v[4] = int64(l.Interval()), int64(l.Window()), l.Burst(), int64(l.MaxWait())
	default:
		v[1], v[2] = int64(l.Window()), l.Burst()
	}
	for _, x := range v {
		dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64(x)))
	}
	return dst
}

// ServerClock is the time of a call decided at the Redis server's clock
// (TIME), for NowArg, Builder.Reset, Batcher.Do and LeaseArgs.
const ServerClock int64 = -1

// NowArg returns the time of a call at t: ServerClock for the zero t, else
// t in Unix ns (t lies between the Unix epoch and core.MaxTime).
func NowArg(t time.Time) int64 {
	if t.IsZero() {
		return ServerClock
	}
	return t.UnixNano()
}

// Call is one request within a script call. A Call may be reused once Do
// or Wait has returned for it; it is not safe for concurrent use.
type Call struct {
	Cost    int64
	Buckets []core.Bucket
	Keys    []string           // the buckets' keys, in the same order
	States  []core.BucketState // out: States[i] answers Buckets[i]

	p pending // its place in a Batcher's queue
}

// Reset clears c for reuse once Do or Wait has returned for it, keeping
// nothing of its request alive but what lets it queue again without
// allocating.
func (c *Call) Reset() {
	done := c.p.done
	*c = Call{}
	c.p.done = done
}

// Builder encodes one script call carrying several requests, decided in
// the order they were added. Keys shared by requests are sent once, and so
// are limits. The zero value is ready for Reset; a Builder may be reused
// after Reset, and is not safe for concurrent use.
type Builder struct {
	Keys   []string // KEYS
	args   []any    // ARGV, strings in interfaces, built by Args
	abuf   []byte   // ARGV[1], built by Args: the header, lbuf, rbuf
	now    int64    // see NowArg
	mode   string
	limits []*core.Limit // the distinct limits, each at its 1-based index
	lbuf   []byte        // the limits
	rbuf   []byte        // the requests
	undo   []any         // ARGV[2…] in ModeRefund
	index  map[string]int
	ttlMS  int64 // the least time to live, ms

	runs   []run   // the requests sent, in order: runs of identical ones
	placed []place // per request added, where it went
	byKey  []int32 // per key index - 1: 1 + the last run whose first bucket it is; 0: none
}

// run is one request in the call, standing for count identical ones.
type run struct {
	off   int                  // of its encoding in rbuf
	m     int                  // its buckets
	count int                  // the requests it stands for
	prev  int32                // 1 + the run before it with the same first key; 0: none
	rec   int                  // Decode: the offset of its records in the reply
	whole bool                 // Decode: answered in one record per bucket (code 3)
	adm   int64                // Decode, whole: the requests admitted
	raw   [maxRunBuckets]int64 // Decode, whole: each bucket's debt before the run
	vals  []string             // DecodeUndo, whole: every request's undo values
}

// place is where a request added went: its run, and its position there.
type place struct{ run, pos int32 }

// runCode is the code of a record that answers a whole run (see take.lua).
const runCode = 3

// SetMinTTL sets the least time to live of every key the call writes,
// rounded up to the millisecond; 0 (the default) keeps each key exactly
// until its bucket is full again.
func (b *Builder) SetMinTTL(d time.Duration) { b.ttlMS = ttlMillis(d) }

// Reset starts a new call at time now (NowArg) in mode (ModeTake,
// ModeTakeUndo or ModeRefund).
func (b *Builder) Reset(now int64, mode string) {
	clear(b.args)
	clear(b.Keys)
	clear(b.limits)
	clear(b.undo)
	b.Keys, b.limits, b.undo = b.Keys[:0], b.limits[:0], b.undo[:0]
	b.lbuf, b.rbuf = b.lbuf[:0], b.rbuf[:0]
	clear(b.runs) // undo values of the last call
	b.runs, b.placed = b.runs[:0], b.placed[:0]
	clear(b.byKey)
	b.byKey = b.byKey[:0]
	b.now, b.mode = now, mode
	clear(b.index)
}

// Mode returns the mode of the call.
func (b *Builder) Mode() string { return b.mode }

// Add appends one request: its cost (a uint64, at most core.MaxCost, which
// a double holds exactly; core.CheckTake refuses more), a count (uint32) and
// its bucket count (uint32), then per bucket the 1-based index of its key
// and of its limit (uint32 each), all little-endian.
//
// In ModeTake and ModeTakeUndo, a request identical to one added before
// (the same cost, above 0, and the same buckets, keys and limits in the
// same order, no key twice) joins it as a run: the count of the first goes
// up, and the script decides them one after the other, at the first's
// place. The requests of one call are concurrent, so that this order is as
// valid as the order they were added in; a hot key's requests then cost
// the script one request's work, and its answer one record (and in
// ModeTakeUndo one pair of undo values) per bucket (see Decode and
// DecodeUndo).
func (b *Builder) Add(c *Call) {
	off, m := len(b.rbuf), len(c.Buckets)
	cost := uint64(min(max(c.Cost, 0), core.MaxCost))
	b.rbuf = binary.LittleEndian.AppendUint64(b.rbuf, cost)
	b.rbuf = binary.LittleEndian.AppendUint32(b.rbuf, 1)
	b.rbuf = binary.LittleEndian.AppendUint32(b.rbuf, uint32(m))
	for i := range c.Buckets {
		b.rbuf = binary.LittleEndian.AppendUint32(b.rbuf, uint32(b.keyIndex(c.Keys[i])))
		b.rbuf = binary.LittleEndian.AppendUint32(b.rbuf, uint32(b.limitIndex(c.Buckets[i].Limit)))
	}
	if (b.mode == ModeTake || b.mode == ModeTakeUndo) && cost > 0 && m > 0 && m <= maxRunBuckets {
		req := b.rbuf[off:]
		first := int(binary.LittleEndian.Uint32(req[16:])) - 1
		for len(b.byKey) <= first {
			b.byKey = append(b.byKey, 0)
		}
		// The runs whose first key this is, latest first: a few shapes of
		// request per key are looked at, not a call's every request.
		r := b.byKey[first] - 1
		for range maxRunLook {
			if r < 0 {
				break
			}
			ru := &b.runs[r]
			if ru.m == m && string(b.rbuf[ru.off:ru.off+8]) == string(req[:8]) &&
				string(b.rbuf[ru.off+16:ru.off+16+8*m]) == string(req[16:]) {
				ru.count++
				binary.LittleEndian.PutUint32(b.rbuf[ru.off+8:], uint32(ru.count))
				b.rbuf = b.rbuf[:off]
				b.placed = append(b.placed, place{run: r, pos: int32(ru.count - 1)})
				return
			}
			r = ru.prev - 1
		}
		if distinctKeys(req[16:]) {
			b.runs = append(b.runs, run{off: off, m: m, count: 1, prev: b.byKey[first]})
			b.byKey[first] = int32(len(b.runs))
			b.placed = append(b.placed, place{run: int32(len(b.runs) - 1)})
			return
		}
	}
	b.runs = append(b.runs, run{off: off, m: m, count: 1})
	b.placed = append(b.placed, place{run: int32(len(b.runs) - 1)})
}

// Order returns the indexes of the requests added since Reset (0 for the
// first added) in the order the script decides them: run after run, a
// run's requests in the order they were added.
func (b *Builder) Order() []int {
	start := make([]int, len(b.runs))
	n := 0
	for i, r := range b.runs {
		start[i] = n
		n += r.count
	}
	out := make([]int, n)
	for i, p := range b.placed {
		out[start[p.run]+int(p.pos)] = i
	}
	return out
}

// maxRunLook is how many runs of the same first key Add compares a request
// with.
const maxRunLook = 8

// maxRunBuckets bounds the buckets of a request that runs may hold: enough
// for every policy of a few tiers, and a bound on distinctKeys' work.
const maxRunBuckets = 8

// distinctKeys reports whether the buckets encoded in enc (8 bytes each,
// the key index first) have distinct keys.
func distinctKeys(enc []byte) bool {
	for i := 0; i < len(enc); i += 8 {
		for j := i + 8; j < len(enc); j += 8 {
			if string(enc[i:i+4]) == string(enc[j:j+4]) {
				return false
			}
		}
	}
	return true
}

// AddRefund appends a request giving back what c took in a ModeTakeUndo
// call; undo holds the two strings per bucket that call returned (before,
// written). If a bucket still holds what the take wrote, its earlier value
// is restored exactly; otherwise, or when undo does not hold two strings per
// bucket, the cost is given back arithmetically.
func (b *Builder) AddRefund(c *Call, undo []string) {
	if len(undo) != 2*len(c.Buckets) {
		undo = nil
	}
	b.Add(c)
	for i := range c.Buckets {
		written, before := "", ""
		if undo != nil {
			before, written = undo[2*i], undo[2*i+1]
		}
		b.undo = append(b.undo, written, before)
	}
}

// Args returns the call's ARGV, strings in interfaces: the one binary
// argument, which it allocates, and in ModeRefund the undo values. Call it
// once the requests are added.
func (b *Builder) Args() []any {
	clear(b.args)
	b.abuf = AppendCall(b.abuf[:0], b.mode, b.now, b.ttlMS, len(b.limits))
	b.abuf = append(append(b.abuf, b.lbuf...), b.rbuf...)
	b.args = append(b.args[:0], string(b.abuf))
	return append(b.args, b.undo...)
}

// keyIndex returns the 1-based index of key in KEYS, adding it if new.
func (b *Builder) keyIndex(key string) int {
	if len(b.Keys) < 8 {
		for i, k := range b.Keys {
			if k == key {
				return i + 1
			}
		}
		b.Keys = append(b.Keys, key)
		return len(b.Keys)
	}
	if b.index == nil {
		b.index = make(map[string]int)
	}
	if len(b.index) == 0 {
		for i, k := range b.Keys {
			b.index[k] = i + 1
		}
	}
	if i, ok := b.index[key]; ok {
		return i
	}
	b.Keys = append(b.Keys, key)
	b.index[key] = len(b.Keys)
	return len(b.Keys)
}

// limitIndex returns the 1-based index of l in the limits argument, adding
// it if new. Limits are few (a policy's rules), so a scan finds them.
func (b *Builder) limitIndex(l *core.Limit) int {
	for i, x := range b.limits {
		if x == l {
			return i + 1
		}
	}
	b.limits = append(b.limits, l)
	b.lbuf = AppendLimit(b.lbuf, l)
	return len(b.limits)
}

// Sizes of the script's reply: a header holding the time it used (int64
// seconds, int32 nanoseconds), then one record per bucket, a code byte and
// three int64 (see take.lua).
const (
	HeaderSize = 12
	RecordSize = 25
)

// Decode decodes reply, the binary string the script returned for a call
// built from calls, one request each and in the same order (no runs), into
// their States, and returns the time the script used. Every value is
// checked: a reply that is not what the script returns means something is
// wrong between here and Redis.
func Decode(reply string, calls []*Call) (time.Time, error) {
	n := 0
	for _, c := range calls {
		n += len(c.States)
	}
	at, err := decodeTime(reply, n)
	if err != nil {
		return time.Time{}, err
	}
	k := HeaderSize
	for _, c := range calls {
		if err := decodeRecords(reply[k:], c.States); err != nil {
			return time.Time{}, err
		}
		k += len(c.States) * RecordSize
	}
	return at, nil
}

// Decode decodes reply, the binary string the script returned for the call
// b built, into the States of calls, the requests added since Reset in the
// order they were added, and returns the time the script used. A run the
// script answered in one record per bucket is expanded here: each request's
// states are what the script would have answered it, request by request
// (TestFastPathSameAsGeneral compares the two), and the number the records
// say were admitted must be the number that the records' debts admit.
func (b *Builder) Decode(reply string, calls []*Call) (time.Time, error) {
	return b.decode(reply, nil, calls, nil)
}

// DecodeUndo is Decode for a call in ModeTakeUndo, whose undo values (the
// reply's second element) it checks and sets, two per bucket, in vals,
// one per call: a run's as the script would have returned them request by
// request. vals[i] is a slice of undo or of memory of its own, with
// nothing after its end.
func (b *Builder) DecodeUndo(reply string, undo []string, calls []*Call, vals [][]string) (time.Time, error) {
	if undo == nil {
		undo = []string{}
	}
	if len(vals) != len(calls) {
		return time.Time{}, fmt.Errorf("ratelimit: redis: room for the undo values of %d requests, %d to decode", len(vals), len(calls))
	}
	return b.decode(reply, undo, calls, vals)
}

// decode is Decode, and DecodeUndo when undo is not nil.
func (b *Builder) decode(reply string, undo []string, calls []*Call, vals [][]string) (time.Time, error) {
	if len(calls) != len(b.placed) {
		return time.Time{}, fmt.Errorf("ratelimit: redis: %d requests to decode, %d added", len(calls), len(b.placed))
	}
	if len(reply) < HeaderSize {
		return time.Time{}, fmt.Errorf("%w: %d bytes", ErrReply, len(reply))
	}
	k := HeaderSize
	for i := range b.runs {
		r := &b.runs[i]
		r.rec, r.vals, r.adm = k, nil, -1
		r.whole = r.count > 1 && k < len(reply) && reply[k] == runCode
		if r.whole {
			k += r.m * RecordSize
		} else {
			k += r.count * r.m * RecordSize
		}
	}
	n := (k - HeaderSize) / RecordSize
	at, err := decodeTime(reply, n)
	if err != nil || len(reply) != k {
		return time.Time{}, cmp.Or(err, fmt.Errorf("%w: %d bytes, %d expected", ErrReply, len(reply), k))
	}
	if undo != nil && len(undo) != 2*n {
		return time.Time{}, fmt.Errorf("%w: %d undo values for %d records", ErrReply, len(undo), n)
	}
	for i, c := range calls {
		p := b.placed[i]
		r := &b.runs[p.run]
		if len(c.States) != r.m || len(c.Buckets) != r.m {
			return time.Time{}, fmt.Errorf("ratelimit: redis: request %d has %d buckets and %d states, %d added", i, len(c.Buckets), len(c.States), r.m)
		}
		first := (r.rec - HeaderSize) / RecordSize // the index of its first record
		if !r.whole {
			first += int(p.pos) * r.m
			if err := decodeRecords(reply[HeaderSize+first*RecordSize:], c.States); err != nil {
				return time.Time{}, err
			}
			if undo != nil {
				vals[i] = undo[2*first : 2*(first+r.m) : 2*(first+r.m)]
			}
			continue
		}
		if r.adm < 0 {
			// The run's first request: its records, checked once.
			if err := r.check(reply[r.rec:r.rec+r.m*RecordSize], c); err != nil {
				return time.Time{}, err
			}
			if undo != nil {
				if r.vals, err = runUndo(at, undo[2*first:2*(first+r.m)], r, c); err != nil {
					return time.Time{}, err
				}
			}
		}
		r.states(int(p.pos), c)
		if undo != nil {
			w := 2 * r.m
			vals[i] = r.vals[int(p.pos)*w : int(p.pos+1)*w : int(p.pos+1)*w]
		}
	}
	return at, nil
}

// runUndo returns the undo values, two per bucket, of every request of
// run r of requests like c, r.adm of them admitted at the time at, from
// the script's pair per bucket: its value before the run and the last the
// run wrote. Request i's value before is the one request i-1 wrote (the
// first's, the run's before), and the value it writes, when admitted, is the
// bucket's with its debt r.raw plus i+1 needs, encoded as the script encodes
// it; the last must be what the script says it wrote.
func runUndo(at time.Time, pairs []string, r *run, c *Call) ([]string, error) {
	m, count, adm, raw := len(c.Buckets), r.count, r.adm, &r.raw
	var enc []byte
	if adm > 0 {
		enc = make([]byte, 0, int(adm)*m*bucketValueSize)
		for j := int64(1); j <= adm; j++ {
			for i, bk := range c.Buckets {
				l := bk.Limit
				enc = appendBucketValue(enc, l, at, raw[i]+j*c.Cost*int64(l.Interval()))
			}
		}
	}
	all := string(enc)
	// written returns the value the j-th admitted request (from 1) wrote
	// to bucket i.
	written := func(j int64, i int) string {
		o := (int(j-1)*m + i) * bucketValueSize
		return all[o : o+bucketValueSize]
	}
	for i := range c.Buckets {
		want := ""
		if adm > 0 {
			want = written(adm, i)
		}
		if pairs[2*i+1] != want {
			return nil, fmt.Errorf("%w: run of %d, bucket %d: the script wrote %x, the debts make %x", ErrReply, count, i, pairs[2*i+1], want)
		}
	}
	out := make([]string, 2*m*count)
	for pos := range int64(count) {
		v := out[int(pos)*2*m:]
		for i := range c.Buckets {
			if pos == 0 || adm == 0 {
				v[2*i] = pairs[2*i]
			} else {
				v[2*i] = written(min(pos, adm), i)
			}
			if pos < adm {
				v[2*i+1] = written(pos+1, i)
			}
		}
	}
	return out, nil
}

// appendBucketValue appends the value the script stores for a bucket of
// token bucket or shaping limit l whose TAT is at plus d ns (d >= 0):
// the algorithm's tag, the TAT as int64 seconds and int32 nanoseconds, the
// fill time; all little-endian.
func appendBucketValue(dst []byte, l *core.Limit, at time.Time, d int64) []byte {
	tag := byte(1)
	if l.Algorithm() == core.AlgShaping {
		tag = 2
	}
	s, ns := at.Unix()+d/1e9, int64(at.Nanosecond())+d%1e9
	if ns >= 1e9 {
		s, ns = s+1, ns-1e9
	}
	dst = append(dst, tag)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(s))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(ns))
	return binary.LittleEndian.AppendUint64(dst, uint64(l.Window()))
}

// decodeTime checks that reply holds a header and n records, and decodes
// the header's time.
func decodeTime(reply string, n int) (time.Time, error) {
	if len(reply) != HeaderSize+n*RecordSize {
		return time.Time{}, fmt.Errorf("%w: %d bytes for %d buckets", ErrReply, len(reply), n)
	}
	sec := int64(le64(reply))
	ns := int64(int32(le32(reply[8:])))
	if sec < 0 || ns < 0 || ns >= 1e9 {
		return time.Time{}, fmt.Errorf("%w: time %d.%09d", ErrReply, sec, ns)
	}
	return time.Unix(sec, ns), nil
}

// decodeRecords decodes len(states) records from the start of recs.
func decodeRecords(recs string, states []core.BucketState) error {
	for i := range states {
		r := recs[i*RecordSize : (i+1)*RecordSize]
		code := core.Reason(r[0])
		rem, reset, wait := int64(le64(r[1:])), int64(le64(r[9:])), int64(le64(r[17:]))
		if code > core.ReasonCostExceedsLimit || rem < 0 || reset < 0 || wait < 0 || code == core.ReasonCostExceedsLimit && wait != 0 {
			return fmt.Errorf("%w: bucket %d: code %d, remaining %d, reset %d, wait %d", ErrReply, i, code, rem, reset, wait)
		}
		// Field by field, for the reason tokenState gives.
		st := &states[i]
		st.Allowed, st.Reason = code == core.ReasonNone, code
		st.Remaining, st.ResetAfter = rem, time.Duration(reset)
		if code == core.ReasonNone {
			st.Delay, st.RetryAfter = time.Duration(wait), 0
		} else {
			st.Delay, st.RetryAfter = 0, time.Duration(wait)
		}
	}
	return nil
}

// check checks the records the script answered run r of requests like c
// with, per bucket the code 3, its debt before the run and the number
// admitted, and keeps the number and the debts: the debts must admit
// exactly that number, as take.lua's fast path counts them.
func (r *run) check(recs string, c *Call) error {
	if len(c.States) > maxRunBuckets {
		return fmt.Errorf("%w: a run of requests of %d buckets", ErrReply, len(c.States))
	}
	adm, admits := int64(r.count), int64(r.count)
	for i := range c.States {
		rec := recs[i*RecordSize : (i+1)*RecordSize]
		l := c.Buckets[i].Limit
		raw, n := int64(le64(rec[1:])), int64(le64(rec[9:]))
		if rec[0] != runCode || raw < 0 || raw >= 1<<53 || n < 0 || n > int64(r.count) || le64(rec[17:]) != 0 ||
			i > 0 && n != adm || !runnable(l) {
			return fmt.Errorf("%w: run of %d, bucket %d: record %x", ErrReply, r.count, i, rec)
		}
		adm, r.raw[i] = n, raw
		admits = min(admits, runCap(l, raw, c.Cost))
	}
	if admits != adm {
		return fmt.Errorf("%w: run of %d: %d admitted, the debts admit %d", ErrReply, r.count, adm, admits)
	}
	r.adm = adm
	return nil
}

// states sets c.States to what the script answers the request at position
// pos of run r, checked: it sees each bucket's debt plus need (cost times
// the interval) for each request admitted before it, as the script's
// request by request path decides (take.lua).
func (r *run) states(pos int, c *Call) {
	allowed := int64(pos) < r.adm
	before := min(int64(pos), r.adm)
	for i := range c.States {
		l := c.Buckets[i].Limit
		tokenState(&c.States[i], l, r.raw[i]+before*c.Cost*int64(l.Interval()), c.Cost, allowed)
	}
}

// runnable reports whether the script's fast path decides l: a token bucket
// or shaping limit at nanosecond resolution.
func runnable(l *core.Limit) bool {
	a := l.Algorithm()
	return (a == core.AlgTokenBucket || a == core.AlgShaping) && l.Resolution() != time.Microsecond
}

// runCap returns how many requests of cost > 0 in a row l admits from a
// bucket owing raw ns, as take.lua's fast path counts them.
func runCap(l *core.Limit, raw, cost int64) int64 {
	if cost > l.Burst() {
		return 0
	}
	need := cost * int64(l.Interval())
	lim := int64(l.Window()) - need - raw
	if l.Algorithm() == core.AlgShaping {
		lim += int64(l.MaxWait())
	}
	if lim < 0 {
		return 0
	}
	return lim/need + 1
}

// tokenState sets *st to take.lua's answer for a bucket of token bucket or
// shaping limit l owing raw ns, to a request of cost: allowed, when the
// request as a whole passes (then this bucket does), or not; a bucket that
// would pass a denied request reports its balance as it stands.
//
// Every field is written, Allowed and Reason in one store: a state built
// whole and copied in is read back in wide loads over narrower stores,
// which stall.
func tokenState(st *core.BucketState, l *core.Limit, raw, cost int64, allowed bool) {
	interval, tau := int64(l.Interval()), int64(l.Window())
	room := tau - raw
	need := cost * interval
	wait := need - room
	shaping := l.Algorithm() == core.AlgShaping
	st.Remaining, st.ResetAfter = max(room, 0)/interval, time.Duration(raw)
	st.RetryAfter, st.Delay = 0, 0
	switch {
	case cost > l.Burst():
		st.Allowed, st.Reason = false, core.ReasonCostExceedsLimit
	case wait <= 0 || shaping && wait <= int64(l.MaxWait()):
		st.Allowed, st.Reason = true, core.ReasonNone
		if allowed {
			st.Delay = time.Duration(max(wait, 0))
			st.Remaining = max(room-need, 0) / interval
			st.ResetAfter = time.Duration(raw + need)
		}
	default:
		if shaping {
			wait -= int64(l.MaxWait())
		}
		st.Allowed, st.Reason, st.RetryAfter = false, core.ReasonLimited, time.Duration(wait)
	}
}

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// AppendReply appends the script's reply for the time at and states to
// dst, as take.lua encodes it. Tests build replies with it.
func AppendReply(dst []byte, at time.Time, states ...core.BucketState) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(at.Unix()))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(at.Nanosecond()))
	for _, st := range states {
		wait := st.RetryAfter
		if st.Allowed {
			wait = st.Delay
		}
		dst = append(dst, byte(st.Reason))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(st.Remaining))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(st.ResetAfter))
		dst = binary.LittleEndian.AppendUint64(dst, uint64(wait))
	}
	return dst
}

// Allowed reports whether every bucket of c allowed it.
func (c *Call) Allowed() bool {
	for i := range c.States {
		if !c.States[i].Allowed {
			return false
		}
	}
	return true
}

// Bucket state values, as the script stores them (see take.lua): a tag
// byte, the algorithm, then little-endian integers. A token bucket's is the
// tag 1, its theoretical arrival time (TAT) as int64 Unix seconds and
// int32 nanoseconds, and the fill time it was written under (int64 ns).
const bucketValueSize = 21

// DecodeTokenBucket decodes a token bucket's stored value: its TAT in Unix
// ns and the fill time in ns it was written under. ok is false for a value
// of another algorithm or format.
func DecodeTokenBucket(v string) (tat, span int64, ok bool) {
	if len(v) != bucketValueSize || v[0] != 1 {
		return 0, 0, false
	}
	sec, ns, span := int64(le64(v[1:])), int64(int32(le32(v[9:]))), int64(le64(v[13:]))
	if sec < 0 || ns < 0 || ns >= 1e9 || span < 0 || sec > math.MaxInt64/1_000_000_000-1 {
		return 0, 0, false
	}
	return sec*1e9 + ns, span, true
}

// EncodeTokenBucket returns the stored value of a token bucket whose TAT is
// tat (Unix ns, >= 0), written under fill time span (ns). Tests plant
// values with it.
func EncodeTokenBucket(tat, span int64) string {
	b := make([]byte, 0, bucketValueSize)
	b = append(b, 1)
	b = binary.LittleEndian.AppendUint64(b, uint64(tat/1e9))
	b = binary.LittleEndian.AppendUint32(b, uint32(tat%1e9))
	b = binary.LittleEndian.AppendUint64(b, uint64(span))
	return string(b)
}

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key, or of the text between the first '{' and the next '}' when that text
// is not empty, modulo 16384.
func Slot(key string) int {
	if i := indexByte(key, '{'); i >= 0 {
		if j := indexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^key[i]]
	}
	return int(crc) & 16383
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
