package redisscript

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
)

// TestBuilderRuns: in ModeTake, a request identical to one added before
// (cost above 0, the same keys and limits in the same order) joins it as a
// run, wherever it was added; anything else is a request of its own.
func TestBuilderRuns(t *testing.T) {
	rules := testLimits(t)
	a, w := &rules[0].Limit, &rules[1].Limit
	one := func(cost int64, keys ...string) *Call {
		c := &Call{Cost: cost, Keys: keys, States: make([]core.BucketState, len(keys))}
		for i, k := range keys {
			l := a
			if i == 1 {
				l = w
			}
			c.Buckets = append(c.Buckets, core.Bucket{Rule: "r", Key: k, Limit: l})
		}
		return c
	}
	calls := []*Call{
		one(1, "k1"),       // run 0
		one(1, "k2"),       // run 1
		one(1, "k1"),       // run 0
		one(2, "k1"),       // another cost: run 2
		one(0, "k1"),       // a read: run 3
		one(0, "k1"),       // reads never run: run 4
		one(1, "k1", "k2"), // two buckets: run 5
		one(1, "k1", "k2"), // run 5
		one(1, "k2", "k1"), // another order: run 6
		one(1, "k1"),       // run 0
	}
	calls[8].Buckets[0].Limit, calls[8].Buckets[1].Limit = w, a
	var b Builder
	b.Reset(ServerClock, ModeTake)
	for _, c := range calls {
		b.Add(c)
	}
	got := parseCall(t, b.Args())
	want := []parsedReq{
		{1, 3, [][2]int{{1, 1}}},
		{1, 1, [][2]int{{2, 1}}},
		{2, 1, [][2]int{{1, 1}}},
		{0, 1, [][2]int{{1, 1}}},
		{0, 1, [][2]int{{1, 1}}},
		{1, 2, [][2]int{{1, 1}, {2, 2}}},
		{1, 1, [][2]int{{2, 2}, {1, 1}}},
	}
	if !reflect.DeepEqual(got.reqs, want) {
		t.Fatalf("requests %+v\n want %+v", got.reqs, want)
	}

	// A reply answering request by request, in the order sent, reaches
	// each call: the run's requests in the order they were added.
	var states []core.BucketState
	for ri, r := range want {
		for pos := range r.count {
			for bi := range r.buckets {
				// Remaining names the run, ResetAfter the position, Delay the bucket.
				states = append(states, core.BucketState{Allowed: true, Remaining: int64(ri), ResetAfter: time.Duration(pos), Delay: time.Duration(bi)})
			}
		}
	}
	at := time.Unix(1767225600, 0)
	gotAt, err := b.Decode(string(AppendReply(nil, at, states...)), calls)
	if err != nil || !gotAt.Equal(at) {
		t.Fatalf("Decode = %v, %v", gotAt, err)
	}
	place := [][2]int64{{0, 0}, {1, 0}, {0, 1}, {2, 0}, {3, 0}, {4, 0}, {5, 0}, {5, 1}, {6, 0}, {0, 2}}
	for i, c := range calls {
		for bi, st := range c.States {
			if st.Remaining != place[i][0] || int64(st.ResetAfter) != place[i][1] || int(st.Delay) != bi {
				t.Errorf("request %d, bucket %d: got the answer of run %d, position %d, bucket %d; want run %d, position %d",
					i, bi, st.Remaining, st.ResetAfter, st.Delay, place[i][0], place[i][1])
			}
		}
	}
	if _, err := b.Decode(string(AppendReply(nil, at, states[1:]...)), calls); !errors.Is(err, ErrReply) {
		t.Errorf("a reply one record short: %v, want ErrReply", err)
	}
	if _, err := b.Decode(string(AppendReply(nil, at, states...)), calls[1:]); err == nil {
		t.Error("Decode with fewer requests than added: no error")
	}

	// ModeTakeUndo runs them too; refunds go one by one.
	b.Reset(ServerClock, ModeTakeUndo)
	b.Add(one(1, "k1"))
	b.Add(one(1, "k1"))
	if got := parseCall(t, b.Args()); len(got.reqs) != 1 || got.reqs[0].count != 2 {
		t.Errorf("ModeTakeUndo: requests %+v, want one run of two", got.reqs)
	}
	b.Reset(ServerClock, ModeRefund)
	b.AddRefund(one(1, "k1"), []string{"b", "w"})
	b.AddRefund(one(1, "k1"), []string{"b", "w"})
	if got := parseCall(t, b.Args()); len(got.reqs) != 2 || got.reqs[0].count != 1 || got.reqs[1].count != 1 {
		t.Errorf("ModeRefund: requests %+v, want two of their own", got.reqs)
	}
	// A key twice in a request (no policy makes one) never runs.
	b.Reset(ServerClock, ModeTake)
	b.Add(one(1, "k1", "k1"))
	b.Add(one(1, "k1", "k1"))
	if got := parseCall(t, b.Args()); len(got.reqs) != 2 {
		t.Errorf("a key twice: requests %+v, want two of their own", got.reqs)
	}
}

// runRecords returns the records the script's fast path answers a run
// with: per bucket the code 3, its debt before the run and the number
// admitted.
func runRecords(at time.Time, adm int64, debts ...int64) string {
	b := binary.LittleEndian.AppendUint64(nil, uint64(at.Unix()))
	b = binary.LittleEndian.AppendUint32(b, uint32(at.Nanosecond()))
	for _, d := range debts {
		b = append(b, runCode)
		b = binary.LittleEndian.AppendUint64(b, uint64(d))
		b = binary.LittleEndian.AppendUint64(b, uint64(adm))
		b = binary.LittleEndian.AppendUint64(b, 0)
	}
	return string(b)
}

// TestDecodeRunsSameAsMemory: a run answered in one record per bucket
// decodes, request by request, to what core's memory store answers the
// same requests one after the other at the same time, from the same debts:
// random token bucket and shaping limits, one to three buckets, debts made
// by earlier takes, runs of 2 to 40 requests of costs 1 to past the burst.
func TestDecodeRunsSameAsMemory(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	p, err := core.NewPolicy(
		core.Rule{Name: "r0", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerSecond(10), 5)},
		core.Rule{Name: "r1", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerMinute(7), 3)},
		core.Rule{Name: "r2", Scope: core.ScopeUser, Limit: core.Shaping(core.PerSecond(20), 4, 300*time.Millisecond)},
		core.Rule{Name: "r3", Scope: core.ScopeUser, Limit: core.Shaping(core.PerSecond(1000), 1, time.Millisecond)},
		core.Rule{Name: "r4", Scope: core.ScopeUser, Limit: core.TokenBucket(core.PerHour(1000), 1000)},
	)
	if err != nil {
		t.Fatal(err)
	}
	rules := p.Rules()
	at := time.Unix(1767225600, 123456789)
	admittedSome, deniedSome := false, false
	for round := range 500 {
		mem, err := core.NewMemoryStore()
		if err != nil {
			t.Fatal(err)
		}
		m := 1 + rng.IntN(3)
		var buckets []core.Bucket
		var keys []string
		for _, ri := range rng.Perm(len(rules))[:m] {
			r := &rules[ri]
			buckets = append(buckets, core.Bucket{Rule: r.Name, Key: "u", Limit: &r.Limit})
			keys = append(keys, r.Name)
		}
		// Debts: takes on each bucket alone, a little earlier.
		for i := range buckets {
			for range rng.IntN(4) {
				tk := core.Take{Now: at.Add(-time.Duration(rng.IntN(200)) * time.Millisecond), Cost: 1 + rng.Int64N(3),
					Buckets: buckets[i : i+1], States: make([]core.BucketState, 1)}
				if err := mem.Take(ctx, &tk); err != nil {
					t.Fatal(err)
				}
			}
		}
		debts := make([]int64, m)
		for i := range buckets {
			tk := core.Take{Now: at, Buckets: buckets[i : i+1], States: make([]core.BucketState, 1)}
			if err := mem.Take(ctx, &tk); err != nil {
				t.Fatal(err)
			}
			debts[i] = int64(tk.States[0].ResetAfter)
		}
		count := 2 + rng.IntN(39)
		cost := 1 + rng.Int64N(4)
		var b Builder
		b.Reset(ServerClock, ModeTake)
		calls := make([]*Call, count)
		want := make([][]core.BucketState, count)
		adm := int64(0)
		for i := range calls {
			calls[i] = &Call{Cost: cost, Buckets: buckets, Keys: keys, States: make([]core.BucketState, m)}
			b.Add(calls[i])
			tk := core.Take{Now: at, Cost: cost, Buckets: buckets, States: make([]core.BucketState, m)}
			if err := mem.Take(ctx, &tk); err != nil {
				t.Fatal(err)
			}
			want[i] = tk.States
			if allAllowed(tk.States) {
				adm++
			}
		}
		if got := parseCall(t, b.Args()); len(got.reqs) != 1 || got.reqs[0].count != count {
			t.Fatalf("round %d: %d identical requests sent as %+v, want one run", round, count, got.reqs)
		}
		admittedSome = admittedSome || adm > 0
		deniedSome = deniedSome || adm < int64(count)
		reply := runRecords(at, adm, debts...)
		gotAt, err := b.Decode(reply, calls)
		if err != nil || !gotAt.Equal(at) {
			t.Fatalf("round %d: Decode = %v, %v", round, gotAt, err)
		}
		for i, c := range calls {
			if !slices.Equal(c.States, want[i]) {
				t.Fatalf("round %d (cost %d, debts %v, %d of %d admitted), request %d:\n got %+v\nwant %+v",
					round, cost, debts, adm, count, i, c.States, want[i])
			}
		}
		// Records that do not add up are refused.
		for name, bad := range map[string]string{
			"one more admitted": runRecords(at, adm+1, debts...),
			"more than the run": runRecords(at, int64(count)+1, debts...),
			"negative debt":     runRecords(at, adm, append([]int64{-1}, debts[1:]...)...),
		} {
			if _, err := b.Decode(bad, calls); !errors.Is(err, ErrReply) {
				t.Fatalf("round %d: %s: Decode error %v, want ErrReply", round, name, err)
			}
		}
	}
	if !admittedSome || !deniedSome {
		t.Errorf("the rounds admitted some: %v, denied some: %v; want both", admittedSome, deniedSome)
	}

	// A run record for a limit the fast path does not decide is refused.
	rules = testLimits(t)
	var b Builder
	b.Reset(ServerClock, ModeTake)
	calls := []*Call{
		{Cost: 1, Buckets: []core.Bucket{{Rule: "b", Key: "u", Limit: &rules[1].Limit}}, Keys: []string{"k"}, States: make([]core.BucketState, 1)},
		{Cost: 1, Buckets: []core.Bucket{{Rule: "b", Key: "u", Limit: &rules[1].Limit}}, Keys: []string{"k"}, States: make([]core.BucketState, 1)},
	}
	b.Add(calls[0])
	b.Add(calls[1])
	if _, err := b.Decode(runRecords(at, 2, 0), calls); !errors.Is(err, ErrReply) {
		t.Errorf("a run record for a sliding window: %v, want ErrReply", err)
	}
}

func allAllowed(states []core.BucketState) bool {
	for _, st := range states {
		if !st.Allowed {
			return false
		}
	}
	return true
}

// TestDecodeRunAllocs: decoding a call of runs allocates nothing.
func TestDecodeRunAllocs(t *testing.T) {
	l := testLimits(t)[0].Limit
	calls := make([]*Call, 32)
	var b Builder
	b.Reset(ServerClock, ModeTake)
	for i := range calls {
		calls[i] = &Call{Cost: 1, Buckets: []core.Bucket{{Rule: "a", Key: "u", Limit: &l}}, Keys: []string{"k"}, States: make([]core.BucketState, 1)}
		b.Add(calls[i])
	}
	reply := runRecords(time.Unix(1767225600, 0), 32, 0)
	if _, err := b.Decode(reply, calls); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = b.Decode(reply, calls) }); n != 0 {
		t.Errorf("Decode of a run of 32: %v allocations, want 0", n)
	}
}

// TestDecodeUndoRun: the undo values of a run answered at once chain: each
// request's value before is the one the request before it wrote (the
// first's, the run's value before), each admitted request's value written
// is the bucket's at its new TAT, a denied one writes nothing; the last
// value written must be the script's, and there must be two undo values
// per record.
func TestDecodeUndoRun(t *testing.T) {
	l := &testLimits(t)[0].Limit // 10/s, burst 50: 100ms per token
	at := time.Unix(1767225600, 900_000_000)
	calls := make([]*Call, 3)
	var b Builder
	b.Reset(ServerClock, ModeTakeUndo)
	for i := range calls {
		calls[i] = &Call{Cost: 20, Buckets: []core.Bucket{{Rule: "a", Key: "u", Limit: l}}, Keys: []string{"k"}, States: make([]core.BucketState, 1)}
		b.Add(calls[i])
	}
	enc := func(d time.Duration) string { return string(appendBucketValue(nil, l, at, int64(d))) }
	// A debt of 0.5s: two requests of 2s pass (to 4.5s), the third does not.
	reply := runRecords(at, 2, int64(500*time.Millisecond))
	last := enc(4500 * time.Millisecond)
	vals := make([][]string, 3)
	if _, err := b.DecodeUndo(reply, []string{"before", last}, calls, vals); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"before", enc(2500 * time.Millisecond)}, {enc(2500 * time.Millisecond), last}, {last, ""}}
	if !reflect.DeepEqual(vals, want) {
		t.Errorf("undo values %q\nwant %q", vals, want)
	}
	if got := enc(4500 * time.Millisecond); got[0] != 1 || binary.LittleEndian.Uint64([]byte(got[1:])) != 1767225605 ||
		binary.LittleEndian.Uint32([]byte(got[9:])) != 400_000_000 || binary.LittleEndian.Uint64([]byte(got[13:])) != uint64(5*time.Second) {
		t.Errorf("the value of a TAT 4.5s past %v: %x", at, got)
	}
	for name, undo := range map[string][]string{
		"another last value": {"before", enc(2500 * time.Millisecond)},
		"none written":       {"before", ""},
		"one value":          {"before"},
		"three values":       {"before", last, ""},
	} {
		if _, err := b.DecodeUndo(reply, undo, calls, vals); !errors.Is(err, ErrReply) {
			t.Errorf("%s: DecodeUndo error %v, want ErrReply", name, err)
		}
	}
	// None admitted: every request's value before is the run's, none writes.
	reply = runRecords(at, 0, int64(4*time.Second))
	if _, err := b.DecodeUndo(reply, []string{"before", ""}, calls, vals); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"before", ""}, {"before", ""}, {"before", ""}}; !reflect.DeepEqual(vals, want) {
		t.Errorf("none admitted: undo values %q, want %q", vals, want)
	}
	// A Builder reused keeps nothing of the last call's undo values.
	b.Reset(ServerClock, ModeTake)
	for i, r := range b.runs[:cap(b.runs)] {
		if r.vals != nil {
			t.Errorf("after Reset, run %d still holds undo values %q", i, r.vals)
		}
	}
}
