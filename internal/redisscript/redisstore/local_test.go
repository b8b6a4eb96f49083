package redisstore

import (
	"testing"
	"time"
)

// These tests check the bookkeeping of the local denial cache without
// Redis: which cached values it accepts after which sequence of replies. The
// Redis-backed behaviour is in the rueidis store tests (adapters/test/rueidis).

var base = time.Unix(1_000_000, 0)

// at names a local monotonic instant: base + ms milliseconds.
func at(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

// exact is an observation that the value was v, in a round trip from ms
// sent to ms recv.
func exact(v int64, sent, recv int) obs { return obs{lo: v, hi: v, sent: at(sent), recv: at(recv)} }

type step struct {
	o       obs
	lowered bool
}

func TestEntryMerge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		steps  []step
		known  bool
		lo, hi int64
		accept []int64 // cached values accepted
		refuse []int64 // cached values refused
	}{
		{
			name:  "later take replaces",
			steps: []step{{o: exact(100, 0, 10)}, {o: exact(200, 20, 30)}},
			known: true, lo: 200, hi: 200,
			accept: []int64{200, 300}, refuse: []int64{100, 0},
		},
		{
			name:  "older take recorded late is old news",
			steps: []step{{o: exact(200, 20, 30)}, {o: exact(100, 0, 10)}},
			known: true, lo: 200, hi: 200,
			accept: []int64{200}, refuse: []int64{100},
		},
		{
			name:  "concurrent takes: the larger is the later",
			steps: []step{{o: exact(200, 5, 15)}, {o: exact(100, 0, 10)}},
			known: true, lo: 200, hi: 200,
			accept: []int64{200, 250}, refuse: []int64{100},
		},
		{
			name:  "full bucket observed after a take: the take's value stays a lower bound",
			steps: []step{{o: exact(200, 0, 10)}, {o: obs{lo: 0, hi: 500, sent: at(20), recv: at(30)}}},
			known: true, lo: 200, hi: 500,
			accept: []int64{200, 400, 900}, refuse: []int64{0, 100},
		},
		{
			name:  "full bucket observed below a known value: it was lowered since",
			steps: []step{{o: exact(800, 0, 10)}, {o: obs{lo: 0, hi: 500, sent: at(20), recv: at(30)}}},
			known: true, lo: 0, hi: 500,
			accept: []int64{0, 100, 900},
		},
		{
			name:  "full bucket observed: any copy decides the same",
			steps: []step{{o: obs{lo: 0, hi: 500, sent: at(0), recv: at(10)}}},
			known: true, lo: 0, hi: 500,
			accept: []int64{0, 400, 900},
		},
		{
			name:  "own refund after: copies from before it are refused",
			steps: []step{{o: exact(200, 0, 10)}, {o: exact(100, 20, 30), lowered: true}},
			known: true, lo: 100, hi: 100,
			accept: []int64{100}, refuse: []int64{200, 50},
		},
		{
			name:   "take concurrent with own refund: unknown",
			steps:  []step{{o: exact(100, 20, 30), lowered: true}, {o: exact(200, 15, 25)}},
			known:  false,
			accept: []int64{50, 100, 200}, // reporting only
		},
		{
			name:  "take strictly before own refund, recorded late: ignored",
			steps: []step{{o: exact(200, 40, 50)}, {o: exact(100, 60, 70), lowered: true}, {o: exact(300, 0, 55)}},
			known: true, lo: 100, hi: 100,
			accept: []int64{100}, refuse: []int64{200, 300},
		},
		{
			name:   "take overlapping the merged span but before own refund: ignored",
			steps:  []step{{o: exact(100, 20, 30), lowered: true}, {o: exact(150, 25, 40)}, {o: exact(300, 0, 19)}},
			known:  false,
			accept: []int64{100, 300},
		},
		{
			name:  "unknown until a later observation",
			steps: []step{{o: exact(100, 20, 30), lowered: true}, {o: exact(200, 15, 25)}, {o: exact(250, 31, 40)}},
			known: true, lo: 250, hi: 250,
			accept: []int64{250}, refuse: []int64{200, 300}, // lowered: at most hi
		},
		{
			name:  "lost take reply: unknown",
			steps: []step{{o: exact(200, 0, 10)}, {o: obs{lo: 1, hi: 0, sent: at(5), recv: at(30)}}},
			known: false,
		},
		{
			name:  "lost refund reply: unknown",
			steps: []step{{o: exact(200, 0, 10)}, {o: obs{lo: 1, hi: 0, sent: at(20), recv: at(30)}, lowered: true}},
			known: false,
		},
		{
			name:  "reset: only the absent key is accepted",
			steps: []step{{o: exact(200, 0, 10)}, {o: exact(0, 20, 30), lowered: true}},
			known: true, lo: 0, hi: 0,
			accept: []int64{0}, refuse: []int64{200},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newLocal(1, 100)
			for _, s := range tc.steps {
				c.observe("k", s.o, s.lowered, time.Minute, true)
			}
			e := c.m["k"]
			if e == nil {
				t.Fatal("no entry")
			}
			if e.known != tc.known || (tc.known && (e.lo != tc.lo || e.hi != tc.hi)) {
				t.Fatalf("entry known %v [%d, %d], want known %v [%d, %d]", e.known, e.lo, e.hi, tc.known, tc.lo, tc.hi)
			}
			views := make([]view, 1)
			if _, ok := c.lookup([]string{"k"}, at(100), views); ok != tc.known {
				t.Fatalf("lookup = %v, want %v (a prover only when known)", ok, tc.known)
			}
			for _, v := range tc.accept {
				if !views[0].accepts(v) {
					t.Errorf("accepts(%d) = false, want true", v)
				}
			}
			for _, v := range tc.refuse {
				if views[0].accepts(v) {
					t.Errorf("accepts(%d) = true, want false", v)
				}
			}
		})
	}
}

// TestRecordTracking: allowed requests create no entries unless one of
// their keys is tracked; denied ones track every key; a full cache forgets
// everything and ignores replies to calls sent before.
func TestRecordTracking(t *testing.T) {
	c := newLocal(1, 3)
	c.observe("a", exact(100, 0, 10), false, 0, false)
	if len(c.m) != 0 {
		t.Fatal("an allowed request's key was tracked")
	}
	c.observe("a", exact(100, 0, 10), false, time.Second, true)
	c.observe("b", exact(100, 0, 10), false, 0, true)
	c.observe("c", exact(100, 0, 10), false, 0, true)
	if len(c.m) != 3 {
		t.Fatalf("%d entries, want 3", len(c.m))
	}
	c.observe("d", exact(100, 0, 10), false, time.Second, true) // full: forget all
	if len(c.m) != 0 || c.floor.IsZero() {
		t.Fatalf("%d entries after overflow, want 0 and a floor", len(c.m))
	}
	c.observe("a", exact(100, 0, 10), false, time.Second, true) // sent before the floor
	if len(c.m) != 0 {
		t.Fatal("a reply to a call sent before the overflow was recorded")
	}
	now := time.Now()
	c.observe("a", obs{lo: 5, hi: 5, sent: now, recv: now}, false, time.Second, true)
	if len(c.m) != 1 {
		t.Fatal("a reply to a call sent after the overflow was ignored")
	}
}

// TestServerNow: the bounds on the server's time bracket the true time,
// counted from when the request was sent and when its reply came, and a
// reference too old is not used.
func TestServerNow(t *testing.T) {
	c := newLocal(2, 10)
	if _, _, ok := c.serverNow(0, at(0)); ok {
		t.Fatal("bounds without a reference")
	}
	server := int64(5_000_000_000)
	c.setClock(1, time.Unix(0, server), at(0), at(4))
	lo, hi, ok := c.serverNow(1, at(10))
	if !ok {
		t.Fatal("no bounds from a fresh reference")
	}
	// The script ran between local 0ms and 4ms: at local 10ms the server
	// reads between server+6ms and server+10ms, widened for drift.
	if wantLo := server + int64(6*time.Millisecond) - int64(6*time.Millisecond)/clockDrift; lo != wantLo {
		t.Errorf("lower bound %d, want %d", lo, wantLo)
	}
	if wantHi := server + int64(10*time.Millisecond) + int64(10*time.Millisecond)/clockDrift; hi != wantHi {
		t.Errorf("upper bound %d, want %d", hi, wantHi)
	}
	if _, _, ok := c.serverNow(0, at(10)); ok {
		t.Error("bounds for a slot without a reference")
	}
	if _, _, ok := c.serverNow(1, at(0).Add(clockMaxAge+time.Nanosecond)); ok {
		t.Error("bounds from a reference older than clockMaxAge")
	}
}
