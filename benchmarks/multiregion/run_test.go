package multiregion

import (
	"errors"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/internal/redistest"
)

func TestMessageRoundTrip(t *testing.T) {
	for _, m := range []message{
		{kind: kindReport, from: 2, a: 123456, b: 789},
		{kind: kindAck, from: 0, a: 1 << 40},
		{kind: kindConsumption, from: 1, a: 0, b: -5},
	} {
		line := string(m.append(nil))
		got, err := parseMessage(line[:len(line)-1])
		if err != nil || got != m {
			t.Errorf("parseMessage(%q) = %+v, %v, want %+v", line, got, err, m)
		}
	}
	for _, bad := range []string{"", "R 1 2", "R x 2 3", "RR 1 2 3", "R -1 2 3", "R 1 2 3 4"} {
		if _, err := parseMessage(bad); err == nil {
			t.Errorf("parseMessage(%q) succeeded, want an error", bad)
		}
	}
}

func TestPercentiles(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Percentiles
	}{
		{"empty", nil, Percentiles{}},
		{"one", ms(7), Percentiles{7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond}},
		{"unsorted", ms(5, 1, 4, 2, 3), Percentiles{3 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentiles(tc.in); got != tc.want {
				t.Errorf("percentiles = %+v, want %+v", got, tc.want)
			}
		})
	}
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i))
	}
	if got := percentiles(hundred); got.P50 != 50 || got.P99 != 99 || got.Max != 100 {
		t.Errorf("percentiles of 1..100 = %+v, want 50, 99, 100", got)
	}
}

// TestPeakExcessAndIdeal: the measures against the global math, on named
// instants.
func TestPeakExcessAndIdeal(t *testing.T) {
	g := Global{Rate: 10, Burst: 2} // a token every 100ms
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	for _, tc := range []struct {
		name      string
		times     []time.Time
		wantPeak  float64
		wantIdeal int64
	}{
		{"none", nil, -2, 0},
		{"burst at t0", at(0, 0), 0, 2},
		{"one over at t0", at(0, 0, 0), 1, 2},
		{"on the math", at(0, 0, 100, 200, 300), 0, 5},
		{"early by 50ms", at(0, 0, 50), 0.5, 2},
		{"unsorted", at(300, 0, 200, 0, 100), 0, 5},
		{"idle refills to the burst only", at(1000, 1000, 1000), 3 - 12, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peak := peakExcess(g, t0, append([]time.Time(nil), tc.times...))
			if diff := peak - tc.wantPeak; diff > 1e-9 || diff < -1e-9 {
				t.Errorf("peakExcess = %v, want %v", peak, tc.wantPeak)
			}
			if got := ideal(g, t0, append([]time.Time(nil), tc.times...)); got != tc.wantIdeal {
				t.Errorf("ideal = %d, want %d", got, tc.wantIdeal)
			}
		})
	}
}

func TestCheckWorkload(t *testing.T) {
	ok := Phase{For: time.Second, Rates: []float64{1, 2}}
	for _, tc := range []struct {
		name string
		w    Workload
	}{
		{"no phase", Workload{}},
		{"wrong number of regions", Workload{Phases: []Phase{{For: time.Second, Rates: []float64{1}}}}},
		{"zero length", Workload{Phases: []Phase{{Rates: []float64{1, 2}}}}},
		{"negative rate", Workload{Phases: []Phase{{For: time.Second, Rates: []float64{1, -2}}}}},
		{"negative cut", Workload{Phases: []Phase{ok}, CutAt: -1, CutFor: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkWorkload(tc.w, 2); !errors.Is(err, ErrInvalid) {
				t.Errorf("checkWorkload = %v, want ErrInvalid", err)
			}
		})
	}
	if err := checkWorkload(Workload{Phases: []Phase{ok}}, 2); err != nil {
		t.Errorf("checkWorkload(valid) = %v", err)
	}
}

func TestNewConfigInvalid(t *testing.T) {
	g := Global{Rate: 500, Burst: 100}
	for _, tc := range []struct {
		name    string
		regions int
		g       Global
		opts    []Option
	}{
		{"one region", 1, g, nil},
		{"zero rate", 3, Global{Burst: 1}, nil},
		{"rate not dividing 1e9", 3, Global{Rate: 3, Burst: 1}, nil},
		{"nil option", 3, g, []Option{nil}},
		{"no instance", 3, g, []Option{WithInstances(0)}},
		{"zero timeout", 3, g, []Option{WithTimeout(0)}},
		{"home out of range", 3, g, []Option{WithHome(3)}},
		{"zero sync", 3, g, []Option{WithSyncInterval(0)}},
		{"zero epoch", 3, g, []Option{WithEpoch(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newConfig("New", tc.regions, tc.g, tc.opts); !errors.Is(err, ErrInvalid) {
				t.Errorf("newConfig = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestCheckFloor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		g         Global
		floor     int64 // 0: the default
		wantFloor int64
		wantErr   bool
	}{
		{"default: rate/20", Global{Rate: 500, Burst: 100}, 0, 25, false},
		{"default raised to a token of burst", Global{Rate: 100, Burst: 10}, 0, 10, false},
		{"given", Global{Rate: 500, Burst: 100}, 100, 100, false},
		{"too high for 3 regions", Global{Rate: 500, Burst: 100}, 200, 200, true},
		{"less than a token of burst", Global{Rate: 500, Burst: 100}, 4, 4, true},
		{"default too high for 3 regions", Global{Rate: 100, Burst: 1}, 0, 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &config{floor: tc.floor}
			err := c.checkFloor(3, tc.g)
			if c.floor != tc.wantFloor || (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("checkFloor(3, %+v) with floor %d: floor %d, error %v; want floor %d, error %v", tc.g, tc.floor, c.floor, err, tc.wantFloor, tc.wantErr)
			}
		})
	}
}

// TestStrategiesLifecycle: each strategy starts on two real servers,
// decides in both regions after Warm, and closes twice without harm.
func TestStrategiesLifecycle(t *testing.T) {
	addrs := []string{redistest.Standalone(t).Addr, redistest.Standalone(t).Addr}
	g := Global{Rate: 100, Burst: 10}
	for _, tc := range []struct {
		name string
		make func(*Net) (Strategy, error)
	}{
		{"home", func(n *Net) (Strategy, error) { return NewHome(addrs, n, g) }},
		{"budgets", func(n *Net) (Strategy, error) { return NewBudgets(addrs, n, g) }},
		{"reconcile", func(n *Net) (Strategy, error) { return NewReconciled(addrs, n, g) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := NewNet(time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			s, err := tc.make(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Warm(t.Context()); err != nil {
				t.Fatalf("Warm() = %v", err)
			}
			for r := range addrs {
				d, err := s.Allow(t.Context(), r)
				if err != nil || !d.Allowed || d.Degraded {
					t.Errorf("Allow(region %d) = allowed %v, degraded %v, %v; want allowed by the store", r, d.Allowed, d.Degraded, err)
				}
			}
			if _, err := s.Allow(t.Context(), len(addrs)); !errors.Is(err, ErrInvalid) {
				t.Errorf("Allow(region %d of %d) error = %v, want ErrInvalid", len(addrs), len(addrs), err)
			}
			first := s.Close()
			if second := s.Close(); second != first {
				t.Errorf("second Close() = %v, want the first's %v", second, first)
			}
		})
	}
}
