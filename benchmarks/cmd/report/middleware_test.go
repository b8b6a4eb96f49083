package main

import (
	"bytes"
	"strings"
	"testing"
)

// middlewareFixture is two runs of the gin comparison, with its ceiling,
// and one fiber scenario, with none, as go test -bench writes them.
const middlewareFixture = `goos: linux
goarch: amd64
pkg: github.com/bucketry/ratelimit/benchmarks
BenchmarkMiddleware/Gin/serial/impl=bare-2        	 1000	  100 ns/op	   0 B/op	 0 allocs/op
BenchmarkMiddleware/Gin/serial/impl=ours_gin-2    	 1000	  400 ns/op	 192 B/op	 3 allocs/op
BenchmarkMiddleware/Gin/serial/impl=ulule_gin-2   	 1000	 1100 ns/op	 232 B/op	13 allocs/op
BenchmarkMiddleware/Gin/serial/impl=ceiling_gin-2 	 1000	  300 ns/op	 144 B/op	 1 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=bare-2      	 1000	   50 ns/op	   0 B/op	 0 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=ours_gin-2  	 1000	  650 ns/op	 192 B/op	 3 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=ulule_gin-2 	 1000	  850 ns/op	 232 B/op	13 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=ceiling_gin-2 	 1000	  450 ns/op	 144 B/op	 1 allocs/op
BenchmarkMiddleware/Gin/serial/impl=bare-2        	 1000	  100 ns/op	   0 B/op	 0 allocs/op
BenchmarkMiddleware/Gin/serial/impl=ours_gin-2    	 1000	  400 ns/op	 192 B/op	 3 allocs/op
BenchmarkMiddleware/Gin/serial/impl=ulule_gin-2   	 1000	 1100 ns/op	 232 B/op	13 allocs/op
BenchmarkMiddleware/Gin/serial/impl=ceiling_gin-2 	 1000	  300 ns/op	 144 B/op	 1 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=bare-2      	 1000	   50 ns/op	   0 B/op	 0 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=ours_gin-2  	 1000	  650 ns/op	 192 B/op	 3 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=ulule_gin-2 	 1000	  850 ns/op	 232 B/op	13 allocs/op
BenchmarkMiddleware/Gin/parallel/impl=ceiling_gin-2 	 1000	  450 ns/op	 144 B/op	 1 allocs/op
BenchmarkMiddleware/Fiber/serial/impl=bare-2          	 1000	  150 ns/op	   0 B/op	 0 allocs/op
BenchmarkMiddleware/Fiber/serial/impl=ours_fiber-2    	 1000	 1150 ns/op	 128 B/op	 3 allocs/op
BenchmarkMiddleware/Fiber/serial/impl=fiber_limiter-2 	 1000	  550 ns/op	  48 B/op	 3 allocs/op
PASS
`

func TestMiddlewareTarget(t *testing.T) {
	res := read(t, middlewareFixture)
	got := map[string]verdict{}
	for _, v := range checkTargets(res) {
		got[v.scenario+" "+v.impl] = v
	}
	for _, tc := range []struct {
		key         string
		met         bool
		missContain string
	}{
		// +300 against +1000: 0.30x.
		{"Middleware/Gin/serial ours_gin", true, ""},
		// +600 against +800: 0.75x, 320 ns/op above the 280 allowed.
		{"Middleware/Gin/parallel ours_gin", false, "0.75x of the 0.35x asked: 320 ns/op to cut"},
		// +1000 against fiber's +400: 2.50x of the 1.00x asked.
		{"Middleware/Fiber/serial ours_fiber", false, "2.50x of the 1.00x asked: 600 ns/op to cut"},
	} {
		v, ok := got[tc.key]
		if !ok {
			t.Errorf("no verdict %q; have %v", tc.key, keys(got))
			continue
		}
		if v.target != "middleware" || !v.known || v.met != tc.met || !strings.Contains(v.miss, tc.missContain) {
			t.Errorf("%s: %+v; want known, met %v, miss containing %q", tc.key, v, tc.met, tc.missContain)
		}
	}

	// Without the bare route the added cost is unknown.
	v := addedCostVerdicts(read(t, strings.ReplaceAll(middlewareFixture, "impl=bare", "impl=none")), "middleware", "Middleware/Gin/serial", "ulule_gin", 0.35)
	if len(v) != 1 || v[0].known {
		t.Errorf("without bare: %+v, want one unknown verdict", v)
	}
}

func TestWriteAddedCost(t *testing.T) {
	res := read(t, middlewareFixture)
	var b bytes.Buffer
	writeAddedCost(&b, res.group("Middleware"))
	out := b.String()
	for _, want := range []string{
		// The cheapest peer, never the ceiling, which adds less.
		"| Gin/serial | 100 | `ours_gin` | +300 | +3 | `ulule_gin` | +1000 | +13 | **0.30x** | `ceiling_gin` | +200 | 0.20x |",
		"| Gin/parallel | 50.0 | `ours_gin` | +600 | +3 | `ulule_gin` | +800 | +13 | **0.75x** | `ceiling_gin` | +400 | 0.50x |",
		// The cheapest peer, never bare; no ceiling.
		"| Fiber/serial | 150 | `ours_fiber` | +1000 | +3 | `fiber_limiter` | +400 | +3 | **2.50x** | – | – | – |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("added-cost table lacks\n%s\nin\n%s", want, out)
		}
	}
}

func TestWriteRoundRatios(t *testing.T) {
	// Three rounds of gin at one goroutine: ours adds 300, 200 and 600,
	// ulule 1000, 1000 and 1500 (ratios 0.30, 0.20 and 0.40, median 0.30,
	// where the ratio of the medians is 300/1000); a fourth scenario whose
	// peer adds nothing in one round leaves that round out of its median.
	const fixture = `BenchmarkMiddleware/Gin/serial/impl=bare-2        	 1000	  100 ns/op
BenchmarkMiddleware/Gin/serial/impl=ours_gin-2    	 1000	  400 ns/op
BenchmarkMiddleware/Gin/serial/impl=ulule_gin-2   	 1000	 1100 ns/op
BenchmarkMiddleware/Fiber/serial/impl=bare-2          	 1000	  100 ns/op
BenchmarkMiddleware/Fiber/serial/impl=ours_fiber-2    	 1000	  300 ns/op
BenchmarkMiddleware/Fiber/serial/impl=fiber_limiter-2 	 1000	  100 ns/op
BenchmarkMiddleware/Gin/serial/impl=bare-2        	 1000	  100 ns/op
BenchmarkMiddleware/Gin/serial/impl=ours_gin-2    	 1000	  300 ns/op
BenchmarkMiddleware/Gin/serial/impl=ulule_gin-2   	 1000	 1100 ns/op
BenchmarkMiddleware/Fiber/serial/impl=bare-2          	 1000	  100 ns/op
BenchmarkMiddleware/Fiber/serial/impl=ours_fiber-2    	 1000	  300 ns/op
BenchmarkMiddleware/Fiber/serial/impl=fiber_limiter-2 	 1000	  500 ns/op
BenchmarkMiddleware/Gin/serial/impl=bare-2        	 1000	  200 ns/op
BenchmarkMiddleware/Gin/serial/impl=ours_gin-2    	 1000	  800 ns/op
BenchmarkMiddleware/Gin/serial/impl=ulule_gin-2   	 1000	 1700 ns/op
BenchmarkMiddleware/Fiber/serial/impl=bare-2          	 1000	  100 ns/op
BenchmarkMiddleware/Fiber/serial/impl=ours_fiber-2    	 1000	  300 ns/op
BenchmarkMiddleware/Fiber/serial/impl=fiber_limiter-2 	 1000	  300 ns/op
`
	res := read(t, fixture)
	var b bytes.Buffer
	writeRoundRatios(&b, res.group("Middleware"))
	out := b.String()
	for _, want := range []string{
		roundsNote,
		"| scenario | ours | peer | round 1 | round 2 | round 3 | median of the rounds |",
		"| Gin/serial | `ours_gin` | `ulule_gin` | 0.30 | 0.20 | 0.40 | **0.30x** |",
		"| Fiber/serial | `ours_fiber` | `fiber_limiter` | – | 0.50 | 1.00 | **0.75x** |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("round-by-round table lacks\n%s\nin\n%s", want, out)
		}
	}

	// Runs of unequal number pair no round: no table, no note. Here the
	// bare route ran twice, ours and ulule's once.
	lines := strings.Split(fixture, "\n")
	b.Reset()
	writeRoundRatios(&b, read(t, strings.Join([]string{lines[0], lines[1], lines[2], lines[6]}, "\n")+"\n").group("Middleware"))
	if b.Len() != 0 {
		t.Errorf("with runs that pair no round: %q, want nothing", b.String())
	}
}
