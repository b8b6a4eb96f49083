package multiregion

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Phase is a stretch of a workload with constant demand.
type Phase struct {
	For   time.Duration // the phase's length, > 0
	Rates []float64     // requests per second offered in each region, >= 0
}

// Workload is the demand Run offers a strategy, phase after phase, and an
// optional partition of the network.
type Workload struct {
	Phases []Phase
	// CutAt is when, from the start, the network is cut, for CutFor; a
	// CutFor of 0 never cuts it.
	CutAt, CutFor time.Duration
}

// maxInFlight bounds the decisions Run has in flight; an arrival beyond it
// is shed, counted in Result.Shed and not offered.
const maxInFlight = 8192

// record is one decision.
type record struct {
	arrival  time.Time     // when the request arrived (the call began)
	at       time.Time     // when it was decided: the store's time, else the call's end
	latency  time.Duration // the decision call's duration
	allowed  bool
	degraded bool // the store failed and the failure mode decided
	failed   bool // the call returned an error
}

// Percentiles summarizes durations.
type Percentiles struct {
	P50, P99, Max time.Duration
}

// String formats p for a report, rounded.
func (p Percentiles) String() string {
	return fmt.Sprintf("p50 %v p99 %v max %v", round(p.P50), round(p.P99), round(p.Max))
}

// round shortens a duration for reports: microseconds below 10ms, else
// tenths of a millisecond.
func round(d time.Duration) time.Duration {
	if d < 10*time.Millisecond {
		return d.Round(time.Microsecond)
	}
	return d.Round(100 * time.Microsecond)
}

// percentiles returns the nearest-rank percentiles of ds, which it sorts.
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ds[max(i, 0)]
	}
	return Percentiles{P50: rank(0.50), P99: rank(0.99), Max: ds[len(ds)-1]}
}

// Counts are the outcomes of a set of decisions: a plain value.
type Counts struct {
	Offered  int64 // requests decided
	Admitted int64 // allowed, including by a failure mode
	Degraded int64 // decided by the failure mode, the store having failed
	Failed   int64 // the call returned an error (a denial by FailClosed, say)
	Latency  Percentiles
}

func count(recs []record) Counts {
	var c Counts
	lat := make([]time.Duration, 0, len(recs))
	for _, r := range recs {
		c.Offered++
		if r.allowed {
			c.Admitted++
		}
		if r.degraded {
			c.Degraded++
		}
		if r.failed {
			c.Failed++
		}
		lat = append(lat, r.latency)
	}
	c.Latency = percentiles(lat)
	return c
}

// Result is what Run measured: a plain value.
type Result struct {
	Strategy string
	Global   Global
	// Elapsed is from the start to the last decision.
	Elapsed time.Duration
	// All and Regions count every decision, and each region's.
	All     Counts
	Regions []Counts
	// Ideal is what one exact global bucket admits of the same arrivals,
	// in the order they arrived.
	Ideal int64
	// PeakExcess is the most the admissions ever exceeded the global math:
	// the maximum, over every admission, of the admissions decided up to
	// its decision time t less B + L×t (t from the start). At most 0 for
	// an exact limiter; negative when it never reached the math.
	PeakExcess float64
	// StorePeakExcess is PeakExcess counting only the admissions a store
	// decided, not those of a failure mode.
	StorePeakExcess float64
	// FinalExcess is the admissions less B + L×Elapsed.
	FinalExcess float64
	// Shed counts arrivals not offered because too many decisions were in
	// flight; 0 in a sound run.
	Shed int64
	// Cut, when the workload cuts the network, counts the decisions of
	// requests that arrived during the cut (All, and each region's in
	// Regions) and gives the global math for its length (CutAllowance:
	// L × its length).
	Cut          *Counts
	CutRegions   []Counts
	CutAllowance float64
	CutLength    time.Duration
}

// Over returns the peak over-admission in tokens, 0 if the admissions
// never exceeded the math, and as a percentage of the math at the end.
func (r *Result) Over() (tokens, pct float64) {
	tokens = max(r.PeakExcess, 0)
	return tokens, 100 * tokens / r.Global.allowance(r.Elapsed)
}

// Under returns how many fewer requests were admitted than one exact
// global bucket admits of the same arrivals (Ideal), 0 if not fewer, and
// as a percentage of Ideal.
func (r *Result) Under() (tokens, pct float64) {
	tokens = max(float64(r.Ideal-r.All.Admitted), 0)
	if r.Ideal == 0 {
		return tokens, 0
	}
	return tokens, 100 * tokens / float64(r.Ideal)
}

// String formats the result for a test log.
func (r *Result) String() string {
	var b strings.Builder
	over, overPct := r.Over()
	under, underPct := r.Under()
	fmt.Fprintf(&b, "%s: %v, offered %d, admitted %d (ideal %d, math B+L×t %.0f), over-admission %.0f (%.1f%%), under-admission %.0f (%.1f%%), final excess %.0f, latency %v",
		r.Strategy, r.Elapsed.Round(time.Millisecond), r.All.Offered, r.All.Admitted, r.Ideal, r.Global.allowance(r.Elapsed), over, overPct, under, underPct, r.FinalExcess, r.All.Latency)
	if r.All.Degraded+r.All.Failed+r.Shed > 0 {
		fmt.Fprintf(&b, ", degraded %d, failed %d, shed %d", r.All.Degraded, r.All.Failed, r.Shed)
	}
	for i, c := range r.Regions {
		fmt.Fprintf(&b, "\n  region %d: offered %d admitted %d degraded %d failed %d, %v", i, c.Offered, c.Admitted, c.Degraded, c.Failed, c.Latency)
	}
	if r.Cut != nil {
		fmt.Fprintf(&b, "\n  during the %v cut: offered %d admitted %d (math L×cut %.0f) degraded %d failed %d, %v",
			r.CutLength.Round(time.Millisecond), r.Cut.Offered, r.Cut.Admitted, r.CutAllowance, r.Cut.Degraded, r.Cut.Failed, r.Cut.Latency)
		for i, c := range r.CutRegions {
			fmt.Fprintf(&b, "\n    region %d: offered %d admitted %d degraded %d failed %d, %v", i, c.Offered, c.Admitted, c.Degraded, c.Failed, c.Latency)
		}
	}
	return b.String()
}

// Run warms s (Strategy.Warm), then offers w to s, region by region, open loop (each arrival is decided
// on a goroutine of its own, on schedule, however long earlier decisions
// take), cuts and heals n as w says, and measures the outcome against the
// global limit g. It fails with an error wrapping ErrInvalid for a
// workload without phases, a phase of another number of regions than s
// has (as regions), or a negative duration or rate.
func Run(ctx context.Context, s Strategy, n *Net, g Global, regions int, w Workload) (*Result, error) {
	if err := checkWorkload(w, regions); err != nil {
		return nil, err
	}
	if err := s.Warm(ctx); err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		recs     = make([][]record, regions)
		inFlight atomic.Int64
		shed     atomic.Int64
		calls    sync.WaitGroup
		pacers   sync.WaitGroup
	)
	start := time.Now()
	var cutStart, cutEnd time.Time
	cutDone := make(chan struct{})
	if w.CutFor > 0 {
		go func() {
			defer close(cutDone)
			time.Sleep(time.Until(start.Add(w.CutAt)))
			cutStart = time.Now()
			n.Cut()
			time.Sleep(time.Until(start.Add(w.CutAt + w.CutFor)))
			n.Heal()
			cutEnd = time.Now()
		}()
	} else {
		close(cutDone)
	}
	for r := range regions {
		pacers.Add(1)
		go func() {
			defer pacers.Done()
			var phaseStart time.Duration
			for _, p := range w.Phases {
				if rate := p.Rates[r]; rate > 0 {
					gap := time.Duration(float64(time.Second) / rate)
					for due := phaseStart; due < phaseStart+p.For; due += gap {
						if wait := time.Until(start.Add(due)); wait > 0 {
							time.Sleep(wait)
						}
						if ctx.Err() != nil {
							return
						}
						if inFlight.Add(1) > maxInFlight {
							inFlight.Add(-1)
							shed.Add(1)
							continue
						}
						calls.Add(1)
						go func() {
							defer calls.Done()
							defer inFlight.Add(-1)
							begin := time.Now()
							d, err := s.Allow(ctx, r)
							end := time.Now()
							rec := record{arrival: begin, at: d.At, latency: end.Sub(begin), allowed: err == nil && d.Allowed, degraded: d.Degraded, failed: err != nil}
							if rec.at.IsZero() {
								rec.at = end
							}
							mu.Lock()
							recs[r] = append(recs[r], rec)
							mu.Unlock()
						}()
					}
				}
				phaseStart += p.For
			}
		}()
	}
	pacers.Wait()
	calls.Wait()
	<-cutDone
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return analyze(s.Name(), g, start, recs, cutStart, cutEnd, shed.Load()), nil
}

func checkWorkload(w Workload, regions int) error {
	if len(w.Phases) == 0 {
		return fmt.Errorf("%w: Run: workload has no phase", ErrInvalid)
	}
	for i, p := range w.Phases {
		if p.For <= 0 || len(p.Rates) != regions {
			return fmt.Errorf("%w: Run: phase %d: length %v and %d rates, want > 0 and %d", ErrInvalid, i, p.For, len(p.Rates), regions)
		}
		for r, rate := range p.Rates {
			if rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
				return fmt.Errorf("%w: Run: phase %d: region %d: rate %v", ErrInvalid, i, r, rate)
			}
		}
	}
	if w.CutAt < 0 || w.CutFor < 0 {
		return fmt.Errorf("%w: Run: cut at %v for %v", ErrInvalid, w.CutAt, w.CutFor)
	}
	return nil
}

// analyze measures recs, each region's decisions, against g from start.
func analyze(name string, g Global, start time.Time, recs [][]record, cutStart, cutEnd time.Time, shed int64) *Result {
	res := &Result{Strategy: name, Global: g, Shed: shed}
	var all, cut []record
	for _, rs := range recs {
		res.Regions = append(res.Regions, count(rs))
		all = append(all, rs...)
		if !cutStart.IsZero() {
			var in []record
			for _, r := range rs {
				if !r.arrival.Before(cutStart) && r.arrival.Before(cutEnd) {
					in = append(in, r)
				}
			}
			res.CutRegions = append(res.CutRegions, count(in))
			cut = append(cut, in...)
		}
	}
	res.All = count(all)
	if !cutStart.IsZero() {
		c := count(cut)
		res.Cut = &c
		res.CutLength = cutEnd.Sub(cutStart)
		res.CutAllowance = float64(g.Rate) * res.CutLength.Seconds()
	}
	var admitted, decided, arrivals []time.Time
	var last time.Time
	for _, r := range all {
		arrivals = append(arrivals, r.arrival)
		if r.allowed {
			admitted = append(admitted, r.at)
			if !r.degraded {
				decided = append(decided, r.at)
			}
		}
		if r.at.After(last) {
			last = r.at
		}
	}
	res.Elapsed = last.Sub(start)
	res.PeakExcess = peakExcess(g, start, admitted)
	res.StorePeakExcess = peakExcess(g, start, decided)
	res.FinalExcess = float64(len(admitted)) - g.allowance(res.Elapsed)
	res.Ideal = ideal(g, start, arrivals)
	return res
}

// peakExcess returns the maximum over the admissions, at the times given
// (which it sorts), of the admissions up to that time less B + L×t, t from
// start; -B without admissions.
func peakExcess(g Global, start time.Time, admitted []time.Time) float64 {
	if len(admitted) == 0 {
		return -float64(g.Burst)
	}
	slices.SortFunc(admitted, func(a, b time.Time) int { return a.Compare(b) })
	peak := math.Inf(-1)
	for i, t := range admitted {
		peak = max(peak, float64(i+1)-g.allowance(t.Sub(start)))
	}
	return peak
}

// ideal returns how many of the arrivals (which it sorts) one exact token
// bucket for g, full at start, admits.
func ideal(g Global, start time.Time, arrivals []time.Time) int64 {
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	tokens, last := float64(g.Burst), start
	var n int64
	for _, t := range arrivals {
		if t.After(last) {
			tokens = min(float64(g.Burst), tokens+float64(g.Rate)*t.Sub(last).Seconds())
			last = t
		}
		if tokens >= 1 {
			tokens--
			n++
		}
	}
	return n
}
