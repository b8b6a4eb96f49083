package multiregion

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// The simulation's numbers: three regions, one global limit of 500
// tokens/s with a burst of 100, 40ms one way between regions.
var (
	simGlobal  = Global{Rate: 500, Burst: 100}
	simLatency = 40 * time.Millisecond
	regionName = []string{"us", "eu", "ap"}
)

// The workloads: most of the demand in us, then most of it in eu; the
// total always above the limit. The cut variant runs longer and cuts the
// network for 3s across the shift.
var (
	usHeavy = []float64{750, 150, 50}
	euHeavy = []float64{100, 600, 150}
	steady  = Workload{Phases: []Phase{{For: 3 * time.Second, Rates: usHeavy}, {For: 3 * time.Second, Rates: euHeavy}}}
	cut     = Workload{
		Phases: []Phase{{For: 4 * time.Second, Rates: usHeavy}, {For: 4 * time.Second, Rates: euHeavy}},
		CutAt:  2500 * time.Millisecond, CutFor: 3 * time.Second,
	}
)

// scenario is one run of the simulation.
type scenario struct {
	name     string
	workload Workload
	make     func(addrs []string, n *Net) (Strategy, error)
	check    func(t *testing.T, s Strategy, res *Result)
}

// row is a scenario's line in the summary.
type row struct {
	name     string
	res      *Result
	calls    int64 // EVALSHA and EVAL on every region's Redis
	messages int64 // messages between regions
	note     string
}

// TestSimulation runs every strategy on three regions, each its own
// redis-server, with 40ms one way between them, steady and with a 3s
// partition, and checks each strategy's claim: home is exact while the
// network holds (and, failing closed, always); budgets' shares never sum
// to more than the limit; reconciliation stays within its derived bound.
// It logs each result and a summary table (docs/MULTIREGION.md).
func TestSimulation(t *testing.T) {
	var servers []*redistest.Server
	var addrs []string
	for range regionName {
		s := redistest.Standalone(t)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr)
	}
	timeout := DefaultTimeout
	home := func(mode core.FailureMode) func([]string, *Net) (Strategy, error) {
		return func(addrs []string, n *Net) (Strategy, error) {
			return NewHome(addrs, n, simGlobal, WithFailureMode(mode), WithTimeout(timeout))
		}
	}
	budgets := func(addrs []string, n *Net) (Strategy, error) { return NewBudgets(addrs, n, simGlobal) }
	reconciled := func(addrs []string, n *Net) (Strategy, error) { return NewReconciled(addrs, n, simGlobal) }

	scenarios := []scenario{
		{"home", steady, home(core.FailOpen), checkHome(false, timeout)},
		{"home, cut, fail open", cut, home(core.FailOpen), checkHome(false, timeout)},
		{"home, cut, fail closed", cut, home(core.FailClosed), checkHome(true, timeout)},
		{"budgets", steady, budgets, checkBudgets},
		{"budgets, cut", cut, budgets, checkBudgets},
		{"reconcile", steady, reconciled, checkReconciled},
		{"reconcile, cut", cut, reconciled, checkReconciled},
	}
	var rows []row
	t.Logf("load average at the start: %s", loadAverage())
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for _, s := range servers {
				for _, cmd := range [][]string{{"FLUSHALL"}, {"CONFIG", "RESETSTAT"}} {
					if _, err := s.Do(cmd...); err != nil {
						t.Fatalf("%s %v: %v", s.Addr, cmd, err)
					}
				}
			}
			n, err := NewNet(simLatency)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			s, err := sc.make(addrs, n)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			res, err := Run(t.Context(), s, n, simGlobal, len(addrs), sc.workload)
			if err != nil {
				t.Fatal(err)
			}
			// Let the last messages land and be acted on.
			time.Sleep(DefaultSyncInterval + 4*simLatency)
			t.Log(res)
			if res.Shed > 0 {
				t.Errorf("%d arrivals shed: the harness could not offer the workload", res.Shed)
			}
			r := row{name: sc.name, res: res}
			for _, srv := range servers {
				calls := srv.CommandCalls(t)
				r.calls += calls["evalsha"] + calls["eval"]
			}
			switch s := s.(type) {
			case *Budgets:
				r.messages, _ = s.Links()
			case *Reconciled:
				st := s.Stats()
				r.messages = st.Sent
				r.note = fmt.Sprintf("W %v, bound %.0f", round(maxLag(st, res)), s.Bound(maxLag(st, res)))
			}
			sc.check(t, s, res)
			rows = append(rows, r)
		})
	}
	t.Logf("load average at the end: %s", loadAverage())
	t.Log("summary\n" + summary(rows))
}

// loadAverage returns the machine's load averages over 1, 5 and 15
// minutes, from /proc/loadavg, or why they are unknown.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// maxLag is W of reconciliation's bound as measured: the longest charge
// lag, plus the longest local decision (an admission is counted when its
// decision returns, up to that long after Redis decided it).
func maxLag(st ReconStats, res *Result) time.Duration {
	return st.MaxLag + res.All.Latency.Max
}

// checkHome checks the home strategy: every admission the home bucket
// decided is exact, and so is the whole run when exact is true (the
// remote regions fail closed); the home region never fails; and during
// the cut the remote regions fail within the timeout. With the network up,
// remote decisions that time out on a loaded machine are failures too,
// which the failure mode decides: they are reported, not asserted.
func checkHome(exact bool, timeout time.Duration) func(*testing.T, Strategy, *Result) {
	return func(t *testing.T, _ Strategy, res *Result) {
		if res.StorePeakExcess > 1e-6 {
			t.Errorf("the home bucket admitted %.2f over the global math; it is exact", res.StorePeakExcess)
		}
		if exact && res.PeakExcess > 1e-6 {
			t.Errorf("home admitted %.2f over the global math, failing closed", res.PeakExcess)
		}
		if res.Regions[0].Degraded+res.Regions[0].Failed > 0 {
			t.Errorf("the home region had %d degraded and %d failed decisions", res.Regions[0].Degraded, res.Regions[0].Failed)
		}
		if res.Cut != nil {
			for r, c := range res.CutRegions[1:] {
				if c.Degraded == 0 {
					t.Errorf("no decision of %s failed during the cut", regionName[r+1])
				}
				// The timeout bounds the store call; on a loaded machine
				// the goroutines around it wait their turn too.
				if limit := 2 * timeout; c.Latency.P99 > limit {
					t.Errorf("during the cut, %s's p99 decision took %v, more than twice the timeout %v", regionName[r+1], c.Latency.P99, timeout)
				}
			}
		}
	}
}

// checkBudgets checks that the shares every region applied in every
// epoch sum to at most the global rate and burst, and that they changed.
func checkBudgets(t *testing.T, s Strategy, res *Result) {
	b := s.(*Budgets)
	shares := b.Shares()
	if len(shares) < 10 {
		t.Fatalf("%d epochs recorded in a run of %v", len(shares), res.Elapsed)
	}
	changes := 0
	for i, e := range shares {
		var rate, burst int64
		for r := range e.Rates {
			rate += e.Rates[r]
			burst += e.Bursts[r]
		}
		if rate > simGlobal.Rate || burst > simGlobal.Burst {
			t.Errorf("epoch %d: shares %v/s (sum %d), bursts %v (sum %d): above %d/s, %d", e.Epoch, e.Rates, rate, e.Bursts, burst, simGlobal.Rate, simGlobal.Burst)
		}
		if i > 0 && fmt.Sprint(e.Rates) != fmt.Sprint(shares[i-1].Rates) {
			changes++
		}
	}
	if changes == 0 {
		t.Errorf("shares never changed in %d epochs", len(shares))
	}
	if n := b.Errors(); n > 0 {
		t.Errorf("%d share changes failed", n)
	}
	var seq []string
	for _, e := range shares {
		seq = append(seq, fmt.Sprint(e.Rates))
	}
	t.Logf("shares (tokens/s: us eu ap), epoch by epoch of %v: %s; %d changes in %d epochs", DefaultEpoch, strings.Join(seq, " "), changes, len(shares))
}

// checkReconciled checks the derived bound with W as measured.
func checkReconciled(t *testing.T, s Strategy, res *Result) {
	c := s.(*Reconciled)
	st := c.Stats()
	if st.Errors > 0 {
		t.Errorf("%d charges failed", st.Errors)
	}
	w := maxLag(st, res)
	bound := c.Bound(w)
	if res.PeakExcess > bound {
		t.Errorf("over-admission %.0f above the bound (R-1)(B+L×W) = %.0f for W = %v", res.PeakExcess, bound, w)
	}
	t.Logf("W %v, bound %.0f, peak excess %.0f, charged %d in %d calls", w, bound, res.PeakExcess, st.Charged, st.Calls)
}

// summary formats rows as a Markdown table.
func summary(rows []row) string {
	var b strings.Builder
	b.WriteString("| scenario | offered | admitted | ideal | over-admission | under-admission | p50 / p99 in region 0 (us) | p50 / p99 elsewhere | Redis calls / decision | messages | during the cut |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		res := r.res
		over, overPct := res.Over()
		under, underPct := res.Under()
		var remote []time.Duration
		for _, c := range res.Regions[1:] {
			remote = append(remote, c.Latency.P50, c.Latency.P99)
		}
		cut := "-"
		if res.Cut != nil {
			var parts []string
			for i, c := range res.CutRegions {
				parts = append(parts, fmt.Sprintf("%s %d/%d (store failed %d) p99 %v", regionName[i], c.Admitted, c.Offered, max(c.Degraded, c.Failed), round(c.Latency.P99)))
			}
			cut = fmt.Sprintf("admitted %d, L×cut %.0f; %s", res.Cut.Admitted, res.CutAllowance, strings.Join(parts, "; "))
		}
		note := ""
		if r.note != "" {
			note = " (" + r.note + ")"
		}
		fmt.Fprintf(&b, "| %s%s | %d | %d | %d | %.0f (%.1f%%) | %.0f (%.1f%%) | %v / %v | eu %v / %v, ap %v / %v | %.2f | %d | %s |\n",
			r.name, note, res.All.Offered, res.All.Admitted, res.Ideal, over, overPct, under, underPct,
			round(res.Regions[0].Latency.P50), round(res.Regions[0].Latency.P99),
			round(remote[0]), round(remote[1]), round(remote[2]), round(remote[3]),
			float64(r.calls)/float64(max(res.All.Offered, 1)), r.messages, cut)
	}
	return b.String()
}
