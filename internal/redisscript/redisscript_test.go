package redisscript

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/bucketry/ratelimit/core"
)

func TestSlot(t *testing.T) {
	// Test vectors from the Redis Cluster specification: CRC16/XMODEM of
	// "123456789" is 0x31C3, and hash tags select what is hashed.
	tests := []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 & 16383},
		{"{user1000}.following", Slot("user1000")},
		{"{user1000}.followers", Slot("user1000")},
		{"foo{}{bar}", Slot("foo{}{bar}")}, // empty tag: the whole key
		{"foo{{bar}}zap", Slot("{bar")},
		{"foo{bar}{zap}", Slot("bar")},
		{"", 0},
	}
	for _, tc := range tests {
		if got := Slot(tc.key); got != tc.want {
			t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

func TestKeys(t *testing.T) {
	plain, err := NewKeys("rl", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", MaxRawIdentity+1)
	tests := []struct {
		name, rule, id, want string
	}{
		{"plain", "per-user", "alice", "rl:per-user:alice"},
		{"braces cannot pick a slot", "per-user", "{evil}", "rl:per-user:%7Bevil%7D"},
		{"escape is escaped", "per-user", "%7B", "rl:per-user:%257B"},
		{"hash mark is escaped", "per-user", "#abc", "rl:per-user:%23abc"},
		{"colons stay", "per-ip", "2001:db8::1", "rl:per-ip:2001:db8::1"},
	}
	for _, tc := range tests {
		if got := plain.Key(tc.rule, tc.id); got != tc.want {
			t.Errorf("%s: Key(%q, %q) = %q, want %q", tc.name, tc.rule, tc.id, got, tc.want)
		}
	}
	if got := plain.Key("r", long); !strings.HasPrefix(got, "rl:r:#") || len(got) != len("rl:r:#")+64 {
		t.Errorf("long identity: Key = %q, want a hashed identity", got)
	}
	if Slot(plain.Key("r", "{a}x")) == Slot("a") && Slot(plain.Key("r", "{b}x")) == Slot("b") &&
		Slot(plain.Key("r", "{c}x")) == Slot("c") {
		t.Errorf("identities still choose their slot through braces")
	}
	secret := []byte("0123456789abcdef")
	hashed, err := NewKeys("rl", true, secret)
	if err != nil {
		t.Fatal(err)
	}
	k := hashed.Key("per-ip", "192.0.2.1")
	if strings.Contains(k, "192.0.2.1") || !strings.HasPrefix(k, "rl:per-ip:#") {
		t.Errorf("hashed key %q holds the raw identity", k)
	}
	other, _ := NewKeys("rl", true, []byte("fedcba9876543210"))
	if other.Key("per-ip", "192.0.2.1") == k {
		t.Errorf("the secret does not change the hash")
	}
	for _, tc := range []struct {
		name    string
		prefix  string
		hashAll bool
		secret  []byte
	}{
		{"empty prefix", "", false, nil},
		{"control character", "a\nb", false, nil},
		{"short secret", "rl", true, []byte("short")},
	} {
		if _, err := NewKeys(tc.prefix, tc.hashAll, tc.secret); !errors.Is(err, core.ErrInvalidOption) {
			t.Errorf("%s: NewKeys error = %v, want ErrInvalidOption", tc.name, err)
		}
	}
}

func testLimits(t *testing.T) []core.Rule {
	t.Helper()
	p, err := core.NewPolicy(
		core.Rule{Name: "a", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(10), 50)},
		core.Rule{Name: "b", Scope: core.ScopeUser, Limit: core.SlidingWindow(100, time.Minute)},
	)
	if err != nil {
		t.Fatal(err)
	}
	return p.Rules()
}

// parsedCall is a script call as take.lua reads it.
type parsedCall struct {
	now, mode, minTTL string
	limits            [][5]int64 // code, a, b, c, d
	reqs              []parsedReq
	refunds           []string // ARGV[2…]: in ModeRefund written and before, per bucket; the lease modes' counts
}

type parsedReq struct {
	cost    int64
	count   int      // identical requests it stands for
	buckets [][2]int // key index, limit index (from 1)
}

// parseCall decodes the arguments as the script does, independently of
// Builder.
func parseCall(t testing.TB, args []any) parsedCall {
	t.Helper()
	s := make([]string, len(args))
	for i, a := range args {
		var ok bool
		if s[i], ok = a.(string); !ok {
			t.Fatalf("argument %d is %T, want a string", i, a)
		}
	}
	if len(s) < 1 || len(s[0]) < 25 {
		t.Fatalf("%d arguments, want at least one of at least 25 bytes", len(s))
	}
	// The header: mode, time (seconds, -1 for the server's; nanoseconds),
	// least time to live in ms, number of limits.
	h := []byte(s[0])
	c := parsedCall{mode: string(h[:1]), minTTL: strconv.FormatInt(int64(binary.LittleEndian.Uint64(h[13:])), 10), refunds: s[1:]}
	if sec, ns := int64(binary.LittleEndian.Uint64(h[1:])), int64(binary.LittleEndian.Uint32(h[9:])); sec != -1 {
		c.now = strconv.FormatInt(sec*1e9+ns, 10)
	}
	nl := int(binary.LittleEndian.Uint32(h[21:]))
	if len(h) < 25+nl*LimitSize {
		t.Fatalf("call argument of %d bytes for %d limits", len(h), nl)
	}
	lb := h[25 : 25+nl*LimitSize]
	for len(lb) > 0 {
		var l [5]int64
		for k := range l {
			l[k] = int64(math.Float64frombits(binary.LittleEndian.Uint64(lb[8*k:])))
		}
		c.limits = append(c.limits, l)
		lb = lb[LimitSize:]
	}
	rb := h[25+nl*LimitSize:]
	for len(rb) > 0 {
		r := parsedReq{cost: int64(binary.LittleEndian.Uint64(rb)), count: int(binary.LittleEndian.Uint32(rb[8:]))}
		m := int(binary.LittleEndian.Uint32(rb[12:]))
		rb = rb[16:]
		for range m {
			r.buckets = append(r.buckets, [2]int{int(binary.LittleEndian.Uint32(rb)), int(binary.LittleEndian.Uint32(rb[4:]))})
			rb = rb[8:]
		}
		c.reqs = append(c.reqs, r)
	}
	return c
}

func TestBuilder(t *testing.T) {
	rules := testLimits(t)
	var b Builder
	b.Reset(ServerClock, ModeTake)
	b.Add(&Call{Cost: 1, Buckets: []core.Bucket{{Rule: "a", Key: "u", Limit: &rules[0].Limit}}, Keys: []string{"k1"}})
	b.Add(&Call{Cost: 2000, Buckets: []core.Bucket{
		{Rule: "b", Key: "u", Limit: &rules[1].Limit},
		{Rule: "a", Key: "u", Limit: &rules[0].Limit},
	}, Keys: []string{"k2", "k1"}})
	got := parseCall(t, b.Args())
	want := parsedCall{now: "", mode: "t", minTTL: "0",
		limits: [][5]int64{{1, 100000000, 5000000000, 50, 0}, {4, 60000000000, 100, 0, 0}},
		reqs:   []parsedReq{{1, 1, [][2]int{{1, 1}}}, {2000, 1, [][2]int{{2, 2}, {1, 1}}}},
	}
	if !reflect.DeepEqual(got.limits, want.limits) || !reflect.DeepEqual(got.reqs, want.reqs) ||
		got.now != want.now || got.mode != want.mode || got.minTTL != want.minTTL || len(got.refunds) != 0 {
		t.Errorf("Args decode to %+v\n want %+v", got, want)
	}
	if strings.Join(b.Keys, " ") != "k1 k2" {
		t.Errorf("Keys = %q, want the two distinct keys once", b.Keys)
	}
	b.SetMinTTL(1500 * time.Microsecond)
	b.Reset(123, ModeRefund)
	b.AddRefund(&Call{Cost: 3, Buckets: []core.Bucket{{Rule: "a", Key: "u", Limit: &rules[0].Limit}}, Keys: []string{"k9"}}, []string{"before", "written"})
	got = parseCall(t, b.Args())
	if len(b.Keys) != 1 || got.now != "123" || got.mode != "r" || got.minTTL != "2" || len(got.limits) != 1 ||
		!reflect.DeepEqual(got.reqs, []parsedReq{{3, 1, [][2]int{{1, 1}}}}) || !slices.Equal(got.refunds, []string{"written", "before"}) {
		t.Errorf("after Reset and AddRefund: Keys %q, args %+v", b.Keys, got)
	}
	// Many keys: the index map takes over from the linear scan.
	for i := range 20 {
		b.keyIndex(strings.Repeat("k", i+1))
	}
	if b.keyIndex("kkkkk") != 6 || b.keyIndex("new") != 22 {
		t.Errorf("keyIndex with many keys is wrong: %q", b.Keys)
	}
}

// TestBuilderAllocs: once a Builder has been used, building a call
// allocates only its arguments (the two binary strings, and the boxing of
// three strings), however many requests it carries.
func TestBuilderAllocs(t *testing.T) {
	rules := testLimits(t)
	var b Builder
	calls := make([]*Call, 32)
	for i := range calls {
		key := "k" + strconv.Itoa(i%20)
		calls[i] = &Call{Cost: 1, Buckets: []core.Bucket{{Rule: "a", Key: key, Limit: &rules[0].Limit}, {Rule: "b", Key: key, Limit: &rules[1].Limit}}, Keys: []string{key, key + "b"}}
	}
	build := func() {
		b.Reset(1767225600000000000, ModeTake)
		for _, c := range calls {
			b.Add(c)
		}
		_ = b.Args()
	}
	build()
	if n := testing.AllocsPerRun(100, build); n > 6 {
		t.Errorf("a call of %d requests: %v allocations, want at most 6", len(calls), n)
	}
}

// TestAppendLimit: a limit longer than 100 days, which decides in whole
// microseconds, has its algorithm's code plus 5, and its interval and wait
// rounded as core rounds them.
func TestAppendLimit(t *testing.T) {
	day := 24 * time.Hour
	p, err := core.NewPolicy(
		core.Rule{Name: "a", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerDay(1), 100)},
		core.Rule{Name: "b", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerDay(1), 101)},
		core.Rule{Name: "c", Scope: core.ScopeUser, Limit: core.Shaping(core.Every(100*day+1), 3, 50*day+1999)},
		core.Rule{Name: "d", Scope: core.ScopeUser, Limit: core.FixedWindow(7, 100*day)},
		core.Rule{Name: "e", Scope: core.ScopeUser, Limit: core.FixedWindow(7, 100*day+time.Millisecond)},
		core.Rule{Name: "f", Scope: core.ScopeUser, Limit: core.SlidingWindow(7, 400*day)},
		core.Rule{Name: "g", Scope: core.ScopeUser, Limit: core.SlidingLog(7, 200*day)},
		core.Rule{Name: "h", Scope: core.ScopeUser, Limit: core.Shaping(core.PerSecond(10), 2, 300*time.Millisecond)},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := [][5]int64{
		{1, 86400000000000, 8640000000000000, 100, 0},
		{6, 86400000000000, 8726400000000000, 101, 0},
		{7, 8640000000001000, 25920000000003000, 3, 4320000000001000},
		{3, 8640000000000000, 7, 0, 0},
		{8, 8640000001000000, 7, 0, 0},
		{9, 34560000000000000, 7, 0, 0},
		{10, 17280000000000000, 7, 0, 0},
		{2, 100000000, 200000000, 2, 300000000},
	}
	rules := p.Rules()
	for i := range rules {
		b := AppendLimit(nil, &rules[i].Limit)
		if len(b) != LimitSize {
			t.Fatalf("AppendLimit(%v): %d bytes, want %d", rules[i].Limit, len(b), LimitSize)
		}
		var got [5]int64
		for k := range got {
			f := math.Float64frombits(binary.LittleEndian.Uint64(b[8*k:]))
			got[k] = int64(f)
			if float64(got[k]) != f {
				t.Errorf("AppendLimit(%v): field %d = %v, not an integer", rules[i].Limit, k, f)
			}
		}
		if got != want[i] {
			t.Errorf("AppendLimit(%v) = %v, want %v", rules[i].Limit, got, want[i])
		}
	}
}

func TestDecode(t *testing.T) {
	at := time.Unix(1767225600, 5)
	states := make([]core.BucketState, 2)
	c := []*Call{{States: states}}
	want := []core.BucketState{
		{Allowed: true, Remaining: 4, ResetAfter: 500, Delay: 7},
		{Reason: core.ReasonLimited, ResetAfter: time.Minute, RetryAfter: time.Second},
	}
	ok := string(AppendReply(nil, at, want...))
	got, err := Decode(ok, c)
	if err != nil || !got.Equal(at) || !slices.Equal(states, want) {
		t.Fatalf("Decode = %v, %v, %+v; want %v, %+v", got, err, states, at, want)
	}
	record := func(code byte, rem, reset, wait int64) string {
		b := []byte{code}
		for _, v := range []int64{rem, reset, wait} {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
		return string(b)
	}
	header := ok[:HeaderSize]
	second := ok[HeaderSize+RecordSize:]
	for name, reply := range map[string]string{
		"empty":            "",
		"short":            ok[:len(ok)-1],
		"long":             ok + "x",
		"unknown code":     header + record(3, 0, 0, 0) + second,
		"negative remain":  header + record(0, -1, 500, 0) + second,
		"negative reset":   header + record(0, 4, -1, 0) + second,
		"negative wait":    header + record(1, 0, 0, -1) + second,
		"retry on a cost":  header + record(2, 0, 0, 5) + second,
		"bad nanoseconds":  string(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint64(nil, 1), 1e9)) + ok[HeaderSize:],
		"negative seconds": string(binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint64(nil, 1<<63), 0)) + ok[HeaderSize:],
	} {
		if _, err := Decode(reply, c); !errors.Is(err, ErrReply) {
			t.Errorf("%s: Decode error = %v, want ErrReply", name, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(ok, c) }); n != 0 {
		t.Errorf("Decode: %v allocations, want 0", n)
	}
}

// TestTokenBucketValue: a token bucket's stored value round-trips, and
// values of another algorithm or format are refused.
func TestTokenBucketValue(t *testing.T) {
	for _, tc := range []struct{ tat, span int64 }{
		{0, 0},
		{1767225600123456789, int64(time.Minute)},
		{1767225600000000000, int64(400 * 24 * time.Hour)},
	} {
		v := EncodeTokenBucket(tc.tat, tc.span)
		tat, span, ok := DecodeTokenBucket(v)
		if !ok || tat != tc.tat || span != tc.span {
			t.Errorf("DecodeTokenBucket(EncodeTokenBucket(%d, %d)) = %d, %d, %v", tc.tat, tc.span, tat, span, ok)
		}
	}
	good := EncodeTokenBucket(1767225600123456789, 5)
	for name, v := range map[string]string{
		"empty":          "",
		"short":          good[:20],
		"shaping":        "\x02" + good[1:],
		"fixed window":   "\x03" + good[1:] + "12345678",
		"decimal":        "1767225600123456789:5",
		"bad nanosecond": good[:9] + string(binary.LittleEndian.AppendUint32(nil, 1e9)) + good[13:],
	} {
		if _, _, ok := DecodeTokenBucket(v); ok {
			t.Errorf("%s: DecodeTokenBucket(%q) ok, want refused", name, v)
		}
	}
}

// fakeScript answers calls like the script would for token buckets of
// burst 1 that are never refilled: the first take of a key passes. It
// records the batches it saw, and their modes. In ModeTakeUndo it returns,
// per bucket, "" before and the key written (or "").
type fakeScript struct {
	mu      sync.Mutex
	taken   map[string]bool
	batches []int
	modes   []string
	block   chan struct{} // when set, each call waits on it
	calls   atomic.Int64
	t       testing.TB
}

func (f *fakeScript) send(ctx context.Context, keys []string, args []any, undo int) (string, []string, error) {
	f.calls.Add(1)
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return "", nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.taken == nil {
		f.taken = map[string]bool{}
	}
	c := parseCall(f.t, args)
	// The requests one by one, a run's in a row.
	var reqs []parsedReq
	for _, r := range c.reqs {
		for range r.count {
			reqs = append(reqs, r)
		}
	}
	f.batches = append(f.batches, len(reqs))
	f.modes = append(f.modes, c.mode)
	var out []core.BucketState
	var vals []string
	for _, r := range reqs {
		for _, bk := range r.buckets {
			key := keys[bk[0]-1]
			if f.taken[key] {
				out = append(out, core.BucketState{Reason: core.ReasonLimited, RetryAfter: 1})
				vals = append(vals, "", "")
			} else {
				f.taken[key] = true
				out = append(out, core.BucketState{Allowed: true, ResetAfter: 1})
				vals = append(vals, "", key)
			}
		}
	}
	if c.mode != ModeTakeUndo {
		vals = nil
	}
	if len(vals) != 2*undo {
		return "", nil, fmt.Errorf("%d undo values, the store expects %d", len(vals), 2*undo)
	}
	return string(AppendReply(nil, time.Unix(1767225600, 0), out...)), vals, nil
}

func call(rules []core.Rule, key string) *Call {
	return &Call{Cost: 1, Buckets: []core.Bucket{{Rule: "a", Key: key, Limit: &rules[0].Limit}}, Keys: []string{key}, States: make([]core.BucketState, 1)}
}

func TestBatcherAloneSendsAtOnce(t *testing.T) {
	rules := testLimits(t)
	f := &fakeScript{t: t}
	b := NewBatcher(f.send, 128, 0, 0)
	c := call(rules, "k")
	at, err := b.Do(context.Background(), ServerClock, c)
	if err != nil || !c.States[0].Allowed || at != time.Unix(1767225600, 0) || len(f.batches) != 1 || f.batches[0] != 1 {
		t.Fatalf("Do = %v, %v, %+v; batches %v", at, err, c.States[0], f.batches)
	}
}

// TestBatcherBatches: while one call is in flight, the others queue and go
// out together, in arrival order, each getting its own answer.
func TestBatcherBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := testLimits(t)
		f := &fakeScript{t: t, block: make(chan struct{})}
		b := NewBatcher(f.send, 128, 0, 0)
		first := make(chan error, 1)
		go func() {
			_, err := b.Do(context.Background(), ServerClock, call(rules, "k"))
			first <- err
		}()
		synctest.Wait() // the first call is in flight
		const n = 50
		var wg sync.WaitGroup
		var allowed atomic.Int64
		queued := func() int { b.mu.Lock(); defer b.mu.Unlock(); return len(b.queue) }
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := call(rules, "k")
				if _, err := b.Do(context.Background(), ServerClock, c); err != nil {
					t.Error(err)
				}
				if c.States[0].Allowed {
					allowed.Add(1)
				}
			}()
		}
		synctest.Wait() // every request is queued
		if q := queued(); q != n {
			t.Fatalf("%d requests queued, want %d", q, n)
		}
		close(f.block)
		wg.Wait()
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		if allowed.Load() != 0 {
			t.Errorf("%d queued requests allowed after the first took the only token", allowed.Load())
		}
		if len(f.batches) != 2 || f.batches[0] != 1 || f.batches[1] != n {
			t.Errorf("batches = %v, want [1 %d]", f.batches, n)
		}
	})
}

func TestBatcherMaxAndTimeArgument(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := testLimits(t)
		f := &fakeScript{t: t, block: make(chan struct{})}
		b := NewBatcher(f.send, 4, 0, 0)
		go b.Do(context.Background(), ServerClock, call(rules, "x"))
		synctest.Wait() // the first call is in flight
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			now := ServerClock // two times never share a call
			if i%2 == 1 {
				now = 1767225600000000000
			}
			go func() {
				defer wg.Done()
				if _, err := b.Do(context.Background(), now, call(rules, "k"+strconv.FormatInt(now, 10))); err != nil {
					t.Error(err)
				}
			}()
		}
		synctest.Wait() // every request is queued
		close(f.block)
		wg.Wait()
		for _, n := range f.batches {
			if n > 4 {
				t.Errorf("a call carried %d requests, more than the max of 4", n)
			}
		}
		if total := sum(f.batches); total != 11 {
			t.Errorf("%d requests sent, want 11", total)
		}
	})
}

func sum(a []int) (s int) {
	for _, v := range a {
		s += v
	}
	return s
}

// TestBatcherCancelWhileQueued: a queued request whose context ends is not
// sent; one already in a call waits for its answer.
func TestBatcherCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := testLimits(t)
		f := &fakeScript{t: t, block: make(chan struct{})}
		b := NewBatcher(f.send, 128, 0, 0)
		done := make(chan struct{})
		go func() { b.Do(context.Background(), ServerClock, call(rules, "a")); close(done) }()
		synctest.Wait() // the first call is in flight
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { _, err := b.Do(ctx, ServerClock, call(rules, "b")); errc <- err }()
		synctest.Wait() // the second request is queued
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled while queued: %v", err)
		}
		close(f.block)
		<-done
		if len(f.batches) != 1 {
			t.Errorf("batches %v: the canceled request was sent", f.batches)
		}
		// The batcher is idle again: the next request goes out alone.
		if _, err := b.Do(context.Background(), ServerClock, call(rules, "c")); err != nil || len(f.batches) != 2 || f.batches[1] != 1 {
			t.Errorf("after cancel: %v, batches %v", err, f.batches)
		}
	})
}

func TestBatcherErrorsReachEveryone(t *testing.T) {
	rules := testLimits(t)
	boom := errors.New("boom")
	b := NewBatcher(func(context.Context, []string, []any, int) (string, []string, error) { return "", nil, boom }, 8, 0, 0)
	if _, err := b.Do(context.Background(), ServerClock, call(rules, "k")); !errors.Is(err, boom) {
		t.Fatalf("Do error = %v, want boom", err)
	}
	bad := NewBatcher(func(context.Context, []string, []any, int) (string, []string, error) { return "x", nil, nil }, 8, 0, 0)
	if _, err := bad.Do(context.Background(), ServerClock, call(rules, "k")); !errors.Is(err, ErrReply) {
		t.Fatalf("Do error = %v, want ErrReply", err)
	}
}

// TestBatcherAnsweredRejoin: the callers a call answers queue their next
// requests before the next call leaves, and go in it with those that
// queued during the call, rather than in a call of their own after it. The
// yield is synctest.Wait here: it runs the callers answered until they
// block again, which runtime.Gosched gives them the chance to do.
func TestBatcherAnsweredRejoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := testLimits(t)
		gate := make(chan struct{}) // one receive per call
		f := &fakeScript{t: t, block: gate}
		b := NewBatcher(f.send, 128, 0, 0)
		b.yield = synctest.Wait
		do := func(key string) {
			if _, err := b.Do(context.Background(), ServerClock, call(rules, key)); err != nil {
				t.Error(err)
			}
		}
		// settle waits, as synctest.Wait does, for every other goroutine
		// to block, without calling Wait while a call's goroutine may
		// (the bubble's clock moves only then).
		settle := func() { time.Sleep(time.Millisecond) }
		var wg sync.WaitGroup
		wg.Go(func() { do("l") })
		settle() // call 1, {l}, in flight
		for _, k := range []string{"a", "b"} {
			wg.Go(func() { do(k + "1"); do(k + "2") })
		}
		settle()
		gate <- struct{}{} // call 1 answered; call 2, {a1, b1}, in flight
		settle()
		wg.Go(func() { do("c") })
		settle() // c queued
		// Call 2 answered: the member that did not send it (the sender
		// reads its answer once the call is handed on) queues its second
		// request, which goes with c.
		gate <- struct{}{}
		settle()
		gate <- struct{}{} // call 3 answered; the sender's second request goes alone
		settle()
		close(gate)
		wg.Wait()
		if !slices.Equal(f.batches, []int{1, 2, 2, 1}) {
			t.Errorf("calls of %v requests, want [1 2 2 1]", f.batches)
		}
	})
}

// TestBatcherStartUndo: Start claims an idle batcher for the caller to send
// by itself; requests queued meanwhile, one of them asking for undo values,
// go out together in one ModeTakeUndo call once it releases the batcher,
// and only the one that asked gets its values.
func TestBatcherStartUndo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := testLimits(t)
		f := &fakeScript{t: t}
		b := NewBatcher(f.send, 128, time.Second, 0)
		_, lead := b.Start(context.Background(), ServerClock, call(rules, "own"), true)
		if !lead {
			t.Fatal("Start on an idle batcher: want to lead")
		}
		type answer struct {
			vals []string
			err  error
		}
		undo, plain := make(chan answer, 1), make(chan answer, 1)
		tu, lu := b.Start(context.Background(), ServerClock, call(rules, "u"), true)
		tp, lp := b.Start(context.Background(), ServerClock, call(rules, "p"), false)
		if lu || lp {
			t.Fatal("Start on a claimed batcher: want queued")
		}
		go func() { _, v, err := tu.Wait(); undo <- answer{v, err} }()
		go func() { _, v, err := tp.Wait(); plain <- answer{v, err} }()
		synctest.Wait()
		if len(f.batches) != 0 {
			t.Fatalf("sent %v before Release", f.batches)
		}
		b.Release()
		u, p := <-undo, <-plain
		if u.err != nil || p.err != nil || !slices.Equal(u.vals, []string{"", "u"}) || p.vals != nil {
			t.Fatalf("undo answer %+v, plain answer %+v; want [\"\" u] and none", u, p)
		}
		if !slices.Equal(f.batches, []int{2}) || !slices.Equal(f.modes, []string{ModeTakeUndo}) {
			t.Fatalf("batches %v in modes %v; want one call of 2 in mode %q", f.batches, f.modes, ModeTakeUndo)
		}
		// Released with nothing queued once the call's goroutine is done
		// (it lets the members answered queue again first): idle again.
		synctest.Wait()
		if _, lead := b.Start(context.Background(), ServerClock, call(rules, "again"), false); !lead {
			t.Fatal("after the queue drained: want to lead")
		}
	})
}

// TestBatcherDeadlineWhileQueued: a request queued longer than the
// timeout is answered with a timeout and not sent; the call bounds every
// member's wait.
func TestBatcherDeadlineWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := testLimits(t)
		f := &fakeScript{t: t}
		const timeout = 100 * time.Millisecond
		b := NewBatcher(f.send, 128, timeout, 0)
		_, lead := b.Start(context.Background(), ServerClock, call(rules, "own"), false)
		if !lead {
			t.Fatal("want to lead")
		}
		tk, _ := b.Start(context.Background(), ServerClock, call(rules, "late"), false)
		errc := make(chan error, 1)
		go func() { _, _, err := tk.Wait(); errc <- err }()
		time.Sleep(timeout)
		b.Release()
		if err := <-errc; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("queued past its deadline: %v, want DeadlineExceeded", err)
		}
		if len(f.batches) != 0 {
			t.Fatalf("batches %v: the late request was sent", f.batches)
		}
	})
}

// TestBatcherSlotsNoCycle: two takes over the same two slots queue on both
// batchers in opposite orders, and each waits on its tickets one after the
// other. Each batcher's next call must go out without waiting for a caller
// that is waiting on the other batcher: both takes complete.
func TestBatcherSlotsNoCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rules := testLimits(t)
		f := &fakeScript{t: t}
		a := NewBatcher(f.send, 128, 0, 0)
		b := NewBatcher(f.send, 128, 0, 0)
		ctx := context.Background()
		// Two other takes hold both batchers.
		if _, lead := a.Start(ctx, ServerClock, call(rules, "a0"), true); !lead {
			t.Fatal("a: want to lead")
		}
		if _, lead := b.Start(ctx, ServerClock, call(rules, "b0"), true); !lead {
			t.Fatal("b: want to lead")
		}
		// y is first in a's queue, x first in b's.
		ya, _ := a.Start(ctx, ServerClock, call(rules, "ya"), true)
		xa, _ := a.Start(ctx, ServerClock, call(rules, "xa"), true)
		xb, _ := b.Start(ctx, ServerClock, call(rules, "xb"), true)
		yb, _ := b.Start(ctx, ServerClock, call(rules, "yb"), true)
		done := make(chan string, 2)
		wait := func(name string, tickets ...Ticket) {
			for _, tk := range tickets {
				if _, _, err := tk.Wait(); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			done <- name
		}
		go wait("x", xa, xb) // a first: its call is led from y's place in a
		go wait("y", yb, ya) // b first: its call is led from x's place in b
		synctest.Wait()
		a.Release()
		b.Release()
		for range 2 {
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("the takes wait on each other")
			}
		}
		if len(f.batches) != 2 || f.batches[0] != 2 || f.batches[1] != 2 {
			t.Errorf("batches %v, want two calls of 2", f.batches)
		}
	})
}

// TestStatesOverwriteStale checks that tokenState and decodeRecords, which
// write into their caller's states rather than returning new ones, write
// every field: over a stale state they answer what they answer over a zero
// one.
func TestStatesOverwriteStale(t *testing.T) {
	stale := core.BucketState{Allowed: true, Reason: core.ReasonLimited, Remaining: -7, ResetAfter: -1, RetryAfter: 12345, Delay: 999}
	for _, def := range []core.Limit{core.TokenBucket(core.PerSecond(10), 5), core.Shaping(core.PerSecond(10), 5, 300*time.Millisecond)} {
		l, err := core.NewLimit(def)
		if err != nil {
			t.Fatal(err)
		}
		tau := int64(l.Window())
		for _, raw := range []int64{0, tau / 2, tau, tau + tau/2} {
			for _, cost := range []int64{1, 3, l.Burst() + 1} {
				for _, allowed := range []bool{false, true} {
					var fresh core.BucketState
					st := stale
					tokenState(&fresh, l, raw, cost, allowed)
					tokenState(&st, l, raw, cost, allowed)
					if st != fresh {
						t.Errorf("tokenState(%v, raw %d, cost %d, %t): %+v over a stale state, %+v over a zero one", def, raw, cost, allowed, st, fresh)
					}
				}
			}
		}
	}
	var recs []byte
	for _, r := range []struct {
		code             byte
		rem, reset, wait int64
	}{{0, 4, 100, 0}, {0, 0, 200, 50}, {1, 0, 300, 70}, {2, 5, 0, 0}} {
		recs = append(recs, r.code)
		recs = binary.LittleEndian.AppendUint64(recs, uint64(r.rem))
		recs = binary.LittleEndian.AppendUint64(recs, uint64(r.reset))
		recs = binary.LittleEndian.AppendUint64(recs, uint64(r.wait))
	}
	fresh, st := make([]core.BucketState, 4), []core.BucketState{stale, stale, stale, stale}
	if err := decodeRecords(string(recs), fresh); err != nil {
		t.Fatal(err)
	}
	if err := decodeRecords(string(recs), st); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st, fresh) {
		t.Errorf("decodeRecords: %+v over stale states, %+v over zero ones", st, fresh)
	}
}
