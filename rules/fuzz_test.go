package rules_test

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/rules"
)

// Whatever the bytes, Parse returns a policy or an *Error that wraps one
// of the documented sentinels, and never panics.
func FuzzParse(f *testing.F) {
	f.Add("limits.yaml", []byte(everyField))
	f.Add("limits.yaml", []byte("rules:\n  - &a {name: x, scope: ip, rate_per_second: 1, burst_capacity: 1}\n  - *a\n"))
	f.Add("limits.json", []byte(`{"rules": [{"key_pattern": "endpoint:/x", "rate": 3, "period": "1s", "burst_capacity": 2}]}`))
	f.Add("limits.json", []byte(`{"rules": [1, null, {"routes": [null]}]}`))
	sentinels := []error{rules.ErrInvalidSpec, core.ErrInvalidRate, core.ErrInvalidBurst, core.ErrInvalidWindow,
		core.ErrUnknownScope, core.ErrDuplicateRule, core.ErrInvalidPlan, core.ErrInvalidRule}
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		p, err := rules.Parse(name, data)
		if err == nil {
			if p == nil {
				t.Fatal("Parse returned neither a policy nor an error")
			}
			return
		}
		var e *rules.Error
		if !errors.As(err, &e) || e.File != name || e.Line < 0 {
			t.Fatalf("Parse error %#v is not an *Error naming the file", err)
		}
		for _, s := range sentinels {
			if errors.Is(err, s) {
				return
			}
		}
		t.Fatalf("Parse error %v wraps no sentinel", err)
	})
}

// A converted rate equals the decimal of the float exactly.
func FuzzRatePerSecond(f *testing.F) {
	for _, v := range []float64{0.5, 2.5, 1000, 0.1, 1e-9, 123.456, 1e9} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		rs, err := rules.CompileRules([]rules.Spec{{Name: "r", Scope: "global", RatePerSecond: &v, BurstCapacity: 1}})
		if err != nil {
			if !errors.Is(err, core.ErrInvalidRate) && !errors.Is(err, core.ErrInvalidBurst) {
				t.Fatalf("rate_per_second %v: %v wraps neither ErrInvalidRate nor ErrInvalidBurst", v, err)
			}
			return
		}
		if math.IsNaN(v) || v <= 0 {
			t.Fatalf("rate_per_second %v accepted", v)
		}
		r := rs[0].Limit.Rate()
		// tokens per second: N * 1e9 / Per in nanoseconds
		got := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(r.N), big.NewInt(int64(time.Second))), big.NewInt(int64(r.Per)))
		want, _ := new(big.Rat).SetString(strconv.FormatFloat(v, 'f', -1, 64))
		if got.Cmp(want) != 0 {
			t.Fatalf("rate_per_second %v = %v = %v per second, want exactly %v", v, r, got, want)
		}
	})
}
