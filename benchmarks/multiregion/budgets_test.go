package multiregion

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bucketry/ratelimit/core"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		total  int64
		floor  int64
		demand []int64
		want   []int64
	}{
		{"no demand: equal", 500, 25, []int64{0, 0, 0}, []int64{167, 167, 166}},
		// rest 425 split 750:150:100 of 1000 is 318.75, 63.75, 42.5:
		// 318, 63, 42 and two tokens left, to the largest remainders
		// (.75 and .75).
		{"proportional", 500, 25, []int64{750, 150, 100}, []int64{344, 89, 67}},
		{"one region only", 500, 25, []int64{10, 0, 0}, []int64{450, 25, 25}},
		{"floor takes all", 75, 25, []int64{5, 1, 1}, []int64{25, 25, 25}},
		{"remainder ties to the lower index", 10, 1, []int64{1, 1}, []int64{5, 5}},
		{"remainders", 11, 1, []int64{1, 1, 1}, []int64{4, 4, 3}},
		{"huge demand", 1_000_000_000, 1, []int64{1 << 62, 1 << 62}, []int64{500_000_000, 500_000_000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := split(tc.total, tc.floor, tc.demand)
			var sum int64
			for _, s := range got {
				sum += s
				if s < tc.floor {
					t.Errorf("split(%d, %d, %v) = %v: a share below the floor", tc.total, tc.floor, tc.demand, got)
				}
			}
			if sum != tc.total {
				t.Errorf("split(%d, %d, %v) = %v, sums to %d, want %d", tc.total, tc.floor, tc.demand, got, sum, tc.total)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("split(%d, %d, %v) = %v, want %v", tc.total, tc.floor, tc.demand, got, tc.want)
			}
		})
	}
}

// newTestBudgets returns budgets for n regions on in-memory limiters,
// without links or goroutines: the test drives the protocol and delivers
// the messages.
func newTestBudgets(t *testing.T, g Global, floor int64, n int) *Budgets {
	t.Helper()
	b := &Budgets{g: g, floor: floor}
	rates := split(g.Rate, floor, make([]int64, n))
	for r := range n {
		br := &budgetRegion{b: b, idx: r, reports: map[int64][]int64{}, acks: map[int64][]bool{}, history: map[int64][2]int64{}}
		br.rate, br.burst = rates[r], b.burstOf(rates[r])
		p, err := policy(br.rate, br.burst)
		if err != nil {
			t.Fatal(err)
		}
		l, err := core.NewLimiter(p)
		if err != nil {
			t.Fatal(err)
		}
		br.in = &instances{limiters: []*core.Limiter{l}}
		br.send = func(message) {}
		b.regions = append(b.regions, br)
	}
	return b
}

// TestBudgetsApply: which share a region applies, by what has arrived.
func TestBudgetsApply(t *testing.T) {
	g := Global{Rate: 500, Burst: 100}
	demand := []int64{750, 150, 100}
	want := split(500, 25, demand) // 344, 89, 67
	for _, tc := range []struct {
		name      string
		region    int
		reports   []bool // which regions' reports of epoch 1 region has
		acks      []bool // which regions' acknowledgments of epoch 1
		wantRate  int64
		wantBurst int64
	}{
		{"everything: grows", 0, []bool{true, true, true}, []bool{true, true, true}, want[0], 68},
		{"everything: shrinks", 1, []bool{true, true, true}, []bool{true, true, true}, want[1], 17},
		{"reports, an ack missing: may not grow", 0, []bool{true, true, true}, []bool{true, true, false}, 167, 33},
		{"reports, an ack missing: shrinks", 2, []bool{true, true, true}, []bool{true, false, true}, want[2], 13},
		{"a report missing: keeps its share", 1, []bool{true, true, false}, []bool{true, true, true}, 167, 33},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBudgets(t, g, 25, 3)
			br := b.regions[tc.region]
			br.mu.Lock()
			rep, acks := br.entry(1)
			for q, ok := range tc.reports {
				if ok {
					rep[q] = demand[q]
				}
			}
			copy(acks, tc.acks)
			br.mu.Unlock()
			br.apply(3)
			s := br.history[3]
			if s[0] != tc.wantRate || s[1] != tc.wantBurst {
				t.Errorf("apply(3) = %d/s burst %d, want %d/s burst %d", s[0], s[1], tc.wantRate, tc.wantBurst)
			}
			lim := br.in.limiters[0].Policy().Rules()[0].Limit
			if lim.Rate() != core.PerSecond(tc.wantRate) || lim.Burst() != tc.wantBurst {
				t.Errorf("limiter's limit after apply(3) = %v burst %d, want %d/s burst %d", lim.Rate(), lim.Burst(), tc.wantRate, tc.wantBurst)
			}
		})
	}
}

// TestBudgetsNeverExceed drives three regions through 2000 epochs of
// random demand with every message lost at random (and whole stretches
// of epochs partitioned), delivering the rest at once, and checks that
// the shares applied in every epoch sum to at most the global rate and
// burst, and that they follow demand when nothing is lost.
func TestBudgetsNeverExceed(t *testing.T) {
	g := Global{Rate: 500, Burst: 100}
	for _, loss := range []float64{0, 0.1, 0.5, 0.9} {
		b := newTestBudgets(t, g, 25, 3)
		rng := rand.New(rand.NewPCG(1, uint64(loss*100)))
		partitioned := false
		for _, br := range b.regions {
			br.send = func(m message) {
				for _, peer := range b.regions {
					if peer != br && !partitioned && rng.Float64() >= loss {
						peer.receive(m)
					}
				}
			}
		}
		for k := int64(10); k < 2010; k++ {
			if k%100 == 0 {
				partitioned = rng.IntN(4) == 0
			}
			for _, br := range b.regions {
				br.demand.Store(rng.Int64N(1000))
			}
			// The regions act in a random order at each event, as their
			// timers fire.
			order := rng.Perm(3)
			for _, r := range order {
				b.regions[r].apply(k)
				b.regions[r].report(k - 1)
			}
			for _, r := range order {
				b.regions[r].ack(k - 1)
			}
		}
		shares := b.Shares()
		if len(shares) != 2000 {
			t.Fatalf("loss %v: %d epochs recorded, want 2000", loss, len(shares))
		}
		changes := 0
		for i, e := range shares {
			var rate, burst int64
			for r := range e.Rates {
				rate += e.Rates[r]
				burst += e.Bursts[r]
			}
			if rate > g.Rate || burst > g.Burst {
				t.Fatalf("loss %v: epoch %d: shares %v (sum %d/s), bursts %v (sum %d), exceed %d/s and %d", loss, e.Epoch, e.Rates, rate, e.Bursts, burst, g.Rate, g.Burst)
			}
			if i > 0 && !slices.Equal(e.Rates, shares[i-1].Rates) {
				changes++
			}
		}
		if changes < 100 && loss <= 0.1 {
			t.Errorf("loss %v: shares changed in %d epochs of 2000: they do not follow demand", loss, changes)
		}
		t.Logf("loss %v: shares changed in %d of 2000 epochs", loss, changes)
	}
}
