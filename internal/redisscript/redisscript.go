// Package redisscript is the script of the Redis stores: the Lua script
// that decides a request against several buckets in one call, how bucket
// keys are named, how arguments are encoded and replies decoded, how
// buckets are grouped by Redis Cluster hash slot, and the batching of
// requests into script calls. The store built on it, which the go-redis
// and rueidis stores share, is package redisstore. It imports no Redis
// client, so each store brings only its own.
package redisscript

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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

// FieldsPerBucket is the number of integers the script returns per bucket.
const FieldsPerBucket = 6

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
// hash of an IPv4 address is reversed by trying all 2^32).
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
	return &Keys{prefix: prefix, secret: secret, hashed: hashAll}, nil
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

// argsEntry is the cached script arguments of one limit.
type argsEntry struct {
	addr  uintptr    // the limit's address: its key in limitArgs
	limit core.Limit // a copy of the limit the arguments describe
	args  [5]any
}

// limitArgs caches the five script arguments of each limit, boxed: limits
// are immutable and few, and formatting or boxing them on every call would
// allocate.
//
// Every Limiter.SetPolicy brings a policy with limits at new addresses, so
// the cache must neither keep a limit alive nor outlive it by much:
//   - It is keyed by the limit's address, an integer the garbage collector
//     does not follow, and an entry holds a copy of the limit, not a
//     pointer to it: nothing in the cache keeps a limit, or the policy it
//     lies in, reachable.
//   - A hit is an entry whose copy equals the limit asked about. The
//     arguments depend on the limit's value only, so when a dead limit's
//     memory is reused by a new one, the old entry is right for it if the
//     values are equal and is replaced if they differ: a reused address
//     never yields wrong arguments.
//   - Every entry is stored together with a cleanup attached to its limit,
//     which deletes the entry once that limit is unreachable, only if the
//     map still holds that very entry (a newer limit at the same address
//     may have replaced it). A limit in a policy is an interior pointer into
//     the policy's rules, which cleanups allow: the cleanup runs when the
//     whole allocation is unreachable. If it deletes an entry that a newer
//     limit of equal value was using, that limit's next lookup stores a new
//     entry with its own cleanup.
//
// So the map holds an entry per limit still reachable, plus entries whose
// cleanup is about to run, whatever the number of reloads. A Limit is larger
// than the tiny pointer-free objects the runtime may batch into one slot,
// whose cleanups may never run. A limit not on the heap (a package-level
// variable) is never reclaimed and gets no cleanup: its entry stays, one per
// such variable.
var limitArgs sync.Map // uintptr (a *core.Limit's address) -> *argsEntry

// recentArgs is a direct-mapped cache in front of limitArgs, indexed by a
// hash of the address: a sync.Map hashes and compares an integer key
// through an interface, which costs about twice this array's one load and
// two comparisons. A slot is a hit under the same rule as the map (the same
// address, an equal limit), so a stale slot is never wrong; a cleanup
// empties the slot of its entry, and a slot holds one entry at most, so
// stale ones are bounded by its length whatever the number of reloads. Two
// hot limits in one slot take turns and fall through to the map.
var recentArgs [1024]atomic.Pointer[argsEntry]

func recentSlot(addr uintptr) *atomic.Pointer[argsEntry] {
	// Fibonacci hashing: the high bits of the product mix every bit of the
	// address, whose low bits are alignment.
	return &recentArgs[uint64(addr)*0x9E3779B97F4A7C15>>(64-10)]
}

// LimitArgs returns the five script arguments describing l, as strings in
// interfaces: its algorithm code (1 to 5, or 6 to 10 for a limit longer
// than 100 days, which decides at microsecond resolution, see
// core.Limit.Resolution) and four numbers (see take.lua). A lookup
// allocates nothing once l has been seen. It is safe for concurrent use.
func LimitArgs(l *core.Limit) *[5]any {
	addr := uintptr(unsafe.Pointer(l))
	slot := recentSlot(addr)
	if e := slot.Load(); e != nil && e.addr == addr && e.limit == *l {
		return &e.args
	}
	if v, ok := limitArgs.Load(addr); ok {
		if e := v.(*argsEntry); e.limit == *l {
			slot.Store(e)
			return &e.args
		}
	}
	e := addLimitArgs(l, addr)
	slot.Store(e)
	return &e.args
}

// addLimitArgs builds l's entry, stores it at addr unless another goroutine
// stored an equal one first, and returns the entry in the map.
func addLimitArgs(l *core.Limit, addr uintptr) *argsEntry {
	e := &argsEntry{addr: addr, limit: *l}
	switch l.Algorithm() {
	case core.AlgTokenBucket, core.AlgShaping:
		e.args = [5]any{
			strconv.Itoa(algCode(l)),
			strconv.FormatInt(int64(l.Interval()), 10),
			strconv.FormatInt(int64(l.Window()), 10),
			strconv.FormatInt(l.Burst(), 10),
			strconv.FormatInt(int64(l.MaxWait()), 10),
		}
	default:
		e.args = [5]any{
			strconv.Itoa(algCode(l)),
			strconv.FormatInt(int64(l.Window()), 10),
			strconv.FormatInt(l.Burst(), 10),
			"0", "0",
		}
	}
	for {
		v, loaded := limitArgs.LoadOrStore(addr, e)
		if !loaded {
			break
		}
		old := v.(*argsEntry)
		if old.limit == *l {
			// Stored meanwhile, by another goroutine for l, whose cleanup
			// is attached, or for a dead limit at this address, whose
			// cleanup is pending: either way one will delete it.
			return old
		}
		// A dead limit's entry, of another value: replace it. Its pending
		// cleanup then finds another entry and leaves it.
		if limitArgs.CompareAndSwap(addr, old, e) {
			break
		}
	}
	// e, the cleanup's argument, must not reach l, or l would stay
	// reachable: it holds l's address as an integer and a copy of l.
	runtime.AddCleanup(l, dropLimitArgs, e)
	return e
}

// dropLimitArgs forgets e once its limit is unreachable, unless another
// entry has taken its place.
func dropLimitArgs(e *argsEntry) {
	limitArgs.CompareAndDelete(e.addr, e)
	recentSlot(e.addr).CompareAndSwap(e, nil)
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

// small holds the decimal strings of 0..1023 in interfaces, so that costs,
// counts and key indices cost no allocation.
var small = func() (a [1024]any) {
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

func boxInt(n int64) any {
	if n >= 0 && n < int64(len(small)) {
		return small[n]
	}
	return strconv.FormatInt(n, 10)
}

// NowArg returns the script's time argument: "" for the server's clock,
// else t in Unix ns.
func NowArg(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixNano(), 10)
}

// Call is one request within a script call.
type Call struct {
	Cost    int64
	Buckets []core.Bucket
	Keys    []string           // the buckets' keys, in the same order
	States  []core.BucketState // out: States[i] answers Buckets[i]
}

// Builder encodes one script call carrying several requests, decided in
// the order they were added. Keys shared by requests are sent once. The zero
// value is ready for Reset; a Builder is not safe for concurrent use.
type Builder struct {
	Keys   []string // KEYS
	Args   []any    // ARGV, strings in interfaces
	calls  int
	index  map[string]int
	minTTL any // the boxed argument; nil: "0"
}

// SetMinTTL sets the least time to live of every key the call writes,
// rounded up to the millisecond; 0 (the default) keeps each key exactly
// until its bucket is full again. It applies from the next Reset.
func (b *Builder) SetMinTTL(d time.Duration) {
	b.minTTL = boxInt(int64((d + time.Millisecond - 1) / time.Millisecond))
}

// Reset starts a new call at time now (NowArg) in mode (ModeTake,
// ModeTakeUndo or ModeRefund).
func (b *Builder) Reset(now, mode string) {
	clear(b.Keys)
	clear(b.Args)
	ttl := b.minTTL
	if ttl == nil {
		ttl = small[0]
	}
	b.Keys, b.Args = b.Keys[:0], append(b.Args[:0], now, mode, small[0], ttl)
	b.calls = 0
	clear(b.index)
}

// Add appends one request.
func (b *Builder) Add(c *Call) {
	b.calls++
	b.Args[2] = boxInt(int64(b.calls))
	b.Args = append(b.Args, boxInt(c.Cost), boxInt(int64(len(c.Buckets))))
	for i := range c.Buckets {
		b.Args = append(b.Args, boxInt(int64(b.keyIndex(c.Keys[i]))))
		a := LimitArgs(c.Buckets[i].Limit)
		b.Args = append(b.Args, a[0], a[1], a[2], a[3], a[4])
	}
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
	b.calls++
	b.Args[2] = boxInt(int64(b.calls))
	b.Args = append(b.Args, boxInt(c.Cost), boxInt(int64(len(c.Buckets))))
	for i := range c.Buckets {
		b.Args = append(b.Args, boxInt(int64(b.keyIndex(c.Keys[i]))))
		a := LimitArgs(c.Buckets[i].Limit)
		written, before := "", ""
		if undo != nil {
			before, written = undo[2*i], undo[2*i+1]
		}
		b.Args = append(b.Args, a[0], a[1], a[2], a[3], a[4], written, before)
	}
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

// Decode decodes the reply to a call built from calls, in the same order,
// into their States, and returns the time the script used. vals holds the
// reply's integers. Every value is checked: a reply that is not what the
// script returns means something is wrong between here and Redis.
func Decode(vals []int64, calls []*Call) (time.Time, error) {
	n := 0
	for _, c := range calls {
		n += len(c.States)
	}
	if len(vals) != n*FieldsPerBucket+2 {
		return time.Time{}, fmt.Errorf("%w: %d integers for %d buckets", ErrReply, len(vals), n)
	}
	k := 0
	for _, c := range calls {
		for i := range c.States {
			v := vals[k : k+FieldsPerBucket]
			k += FieldsPerBucket
			if v[0] != 0 && v[0] != 1 || v[1] < 0 || v[1] > int64(core.ReasonCostExceedsLimit) ||
				v[2] < 0 || v[3] < 0 || v[4] < 0 || v[5] < 0 || (v[0] == 1) != (v[1] == 0) {
				return time.Time{}, fmt.Errorf("%w: bucket %d: %v", ErrReply, i, v)
			}
			c.States[i] = core.BucketState{
				Allowed:    v[0] == 1,
				Reason:     core.Reason(v[1]),
				Remaining:  v[2],
				ResetAfter: time.Duration(v[3]),
				RetryAfter: time.Duration(v[4]),
				Delay:      time.Duration(v[5]),
			}
		}
	}
	sec, ns := vals[len(vals)-2], vals[len(vals)-1]
	if sec < 0 || ns < 0 || ns >= 1e9 {
		return time.Time{}, fmt.Errorf("%w: time %d.%09d", ErrReply, sec, ns)
	}
	return time.Unix(sec, ns), nil
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
