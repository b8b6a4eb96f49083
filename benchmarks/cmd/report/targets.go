package main

import (
	"fmt"
	"regexp"
	"strings"
)

// verdict is one target checked on one scenario and one of our
// implementations.
type verdict struct {
	target   string // the target's short name
	scenario string
	impl     string
	measured string
	required string
	met      bool
	known    bool   // false when something needed was not measured
	miss     string // by how much it missed, when it did
}

// profileBench is the -bench pattern that reruns the verdict's benchmark
// alone.
func (v verdict) profileBench() string {
	parts := strings.Split("Benchmark"+v.scenario+"/impl="+v.impl, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// target is one of the goals the issue set, checked against the results.
type target struct {
	name string
	text string
	// check returns a verdict per scenario and implementation it covers.
	check func(r *results) []verdict
}

// targets restates the goals of the benchmark issue.
var targets = []target{
	{
		name: "memory-speed",
		text: "In memory, hot key and 100k keys: at least 2x the decisions/s of the fastest peer, with 0 allocs/op.",
		check: func(r *results) []verdict {
			var out []verdict
			for _, sc := range []string{"Memory/HotKeyAllow", "Memory/Keys100k"} {
				out = append(out, ratioVerdicts(r, "memory-speed", sc, 2, true)...)
			}
			return out
		},
	},
	{
		name: "redis-64",
		text: "On Redis, allowed decisions/s at 64 goroutines: at least 2.5x the best peer.",
		check: func(r *results) []verdict {
			var out []verdict
			for _, sc := range []string{"Redis/HotKeyAllow/g=64", "Redis/Keys10k/g=64", "Redis/ThreeTier/g=64"} {
				out = append(out, ratioVerdicts(r, "redis-64", sc, 2.5, false)...)
			}
			return out
		},
	},
	{
		name: "three-tier-one-trip",
		text: "On Redis, a 3-tier check in one round trip: at most one command sent per decision at 1 goroutine, where no batching helps.",
		check: func(r *results) []verdict {
			return eachOurs(r, "three-tier-one-trip", "Redis/ThreeTier/g=1", "<= 1 command/decision", func(v *verdict, e *entry) {
				cmds, ok := e.value(unitCmds)
				if !ok {
					return
				}
				v.known = true
				v.measured = fmt.Sprintf("%.3f commands/decision", cmds)
				// A rare reconnection or reload is not a second round trip
				// per decision; half a percent is the allowance for it.
				v.met = cmds <= 1.005
				if !v.met {
					v.miss = fmt.Sprintf("%.2f round trips per decision, not 1", cmds)
				}
			})
		},
	},
	{
		name: "deny-flood-local",
		text: "On Redis, in a deny flood at least 95% of denials answered locally, without a round trip.",
		check: func(r *results) []verdict {
			var out []verdict
			if g := r.group("Redis"); g != nil {
				for _, s := range g.scenarios {
					if !strings.HasPrefix(s.name, "Redis/DenyFlood/") {
						continue
					}
					out = append(out, eachOurs(r, "deny-flood-local", s.name, ">= 95% local", func(v *verdict, e *entry) {
						share, ok := e.value(unitLocal)
						if !ok {
							return
						}
						v.known = true
						v.measured = fmt.Sprintf("%.1f%% local", 100*share)
						v.met = share >= 0.95
						if !v.met {
							v.miss = fmt.Sprintf("%.1f points short", 100*(0.95-share))
						}
					})...)
				}
			}
			if len(out) == 0 {
				out = eachOurs(r, "deny-flood-local", "Redis/DenyFlood", ">= 95% local", nil)
			}
			return out
		},
	},
}

// eachOurs makes one verdict per implementation of ours in scenario sc,
// filled in by f; a scenario that was not run gives one unknown verdict.
func eachOurs(r *results, name, sc, required string, f func(*verdict, *entry)) []verdict {
	s := r.scenario(sc)
	if s == nil {
		return []verdict{{target: name, scenario: sc, required: required, measured: "not measured"}}
	}
	var out []verdict
	for _, e := range s.entries {
		if kindOf(e.impl) != kindOurs {
			continue
		}
		v := verdict{target: name, scenario: sc, impl: e.impl, required: required, measured: "not measured"}
		f(&v, e)
		out = append(out, v)
	}
	if len(out) == 0 {
		return []verdict{{target: name, scenario: sc, required: required, measured: "ours not measured"}}
	}
	return out
}

// ratioVerdicts checks that each of our implementations decides at least
// min times as fast as the best peer of scenario sc, and with zeroAllocs
// that it allocates nothing.
func ratioVerdicts(r *results, name, sc string, min float64, zeroAllocs bool) []verdict {
	var peer *entry
	if s := r.scenario(sc); s != nil {
		peer = s.best(kindPeer)
	}
	required := fmt.Sprintf(">= %.1fx the best peer", min)
	if zeroAllocs {
		required += ", 0 allocs/op"
	}
	return eachOurs(r, name, sc, required, func(v *verdict, e *entry) {
		ours, ok := e.value(unitDecisions)
		if !ok || peer == nil {
			return
		}
		theirs, _ := peer.value(unitDecisions)
		if theirs <= 0 {
			return
		}
		ratio := ours / theirs
		v.known = true
		v.measured = fmt.Sprintf("%.2fx `%s`", ratio, peer.impl)
		v.met = ratio >= min
		var misses []string
		if !v.met {
			misses = append(misses, fmt.Sprintf("%.2fx of the %.1fx asked: %.0f%% more decisions/s needed", ratio, min, 100*(min/ratio-1)))
		}
		if zeroAllocs {
			allocs, ok := e.value(unitAllocs)
			switch {
			case !ok:
				v.known = false
			case allocs > 0:
				v.met = false
				misses = append(misses, fmt.Sprintf("%.2f allocs/op, not 0", allocs))
			}
			v.measured += fmt.Sprintf(", %.0f allocs/op", allocs)
		}
		v.miss = strings.Join(misses, "; ")
	})
}

// checkTargets evaluates every target.
func checkTargets(r *results) []verdict {
	var out []verdict
	for _, t := range targets {
		out = append(out, t.check(r)...)
	}
	return out
}

func verdictText(v verdict) string {
	switch {
	case !v.known:
		return "not measured"
	case v.met:
		return "met"
	}
	return "missed: " + v.miss
}
