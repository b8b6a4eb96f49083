package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// percentiles are the latency percentiles of a set of requests.
type percentiles struct {
	P50, P99, P999, Max time.Duration
}

// percentilesOf returns the percentiles of ls, which it sorts. Empty:
// zeros.
func percentilesOf(ls []time.Duration) percentiles {
	if len(ls) == 0 {
		return percentiles{}
	}
	slices.Sort(ls)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ls)) + 0.5)
		if i >= len(ls) {
			i = len(ls) - 1
		}
		return ls[i]
	}
	return percentiles{P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: ls[len(ls)-1]}
}

// A bucketCheck is one bucket's admitted requests against the exact math.
type bucketCheck struct {
	Tier     tier
	Key      string
	Offered  int64 // requests that asked this bucket (admitted or not)
	Admitted int64 // requests admitted, each of which took a token
	Allowed  int64 // the most the exact math admits over the run
}

// Over is the over-admission: admitted beyond the math (0 when exact).
func (b bucketCheck) Over() int64 { return max(0, b.Admitted-b.Allowed) }

// A tierTotal adds up one tier's buckets: all of them, and those whose
// demand reached the math's allowance (saturated), where admitted against
// allowed measures under-admission.
type tierTotal struct {
	Tier                  tier
	Buckets, Saturated    int
	SatAdmitted, SatAllow int64
}

// second is one second of a run.
type second struct {
	Requests, OK, Denied, Failed int
	Latency                      percentiles
	Admitted                     map[string]int // by bucket ("global", "hot user")
}

// summary is what the report says of one run.
type summary struct {
	Name                  string
	Target                target
	Requests, OK, Denied  int
	Failed                int
	FirstFailures         []string // a few failed requests' outcomes
	Rate                  float64  // requests sent per second
	Elapsed               time.Duration
	Latency               percentiles
	Buckets               []bucketCheck // every bucket that was asked
	OverBuckets           int           // buckets admitted beyond the math
	Over                  int64         // requests admitted beyond the math, summed
	Saturated             []bucketCheck // the buckets of interest: hot user, endpoint, global
	Tiers                 []tierTotal   // by tier, in the order of tiers
	RedisCPU              time.Duration
	RedisCommands         int64
	AppCPU                time.Duration
	LocalDenials, Denials float64 // from the instances' metrics
	Degraded              float64 // decisions the store failed, which the limiter failed open
	Scripts               int64   // script calls on Redis
	Seconds               []second
	Outage                [2]time.Duration
	OutageErr             error
	Load                  [2]string // the 1-minute load average before and after the run
}

// summarize checks a run against the exact math and condenses it.
func summarize(r *result, users int) (*summary, error) {
	s := &summary{Name: r.Target.Name(), Target: r.Target, Elapsed: r.Elapsed, Outage: r.Outage, OutageErr: r.OutageErr}
	s.Requests = len(r.Samples)
	if r.Elapsed > 0 {
		s.Rate = float64(s.Requests) / r.Elapsed.Seconds()
	}
	s.RedisCPU, s.RedisCommands, s.Scripts, s.AppCPU = r.Redis.cpu, r.Redis.commands, r.Redis.scripts, r.AppCPU
	w := &workload{users: users}
	type bkey struct {
		tier int
		key  string
	}
	checks := make(map[bkey]*bucketCheck)
	lat := make([]time.Duration, 0, len(r.Samples))
	nsec := int(r.Elapsed/time.Second) + 1
	s.Seconds = make([]second, nsec)
	secLat := make([][]time.Duration, nsec)
	var refs []bucketRef
	for _, x := range r.Samples {
		lat = append(lat, x.latency)
		sec := &s.Seconds[min(int(x.at/time.Second), nsec-1)]
		sec.Requests++
		i := min(int(x.at/time.Second), nsec-1)
		secLat[i] = append(secLat[i], x.latency)
		switch {
		case x.failed:
			s.Failed++
			sec.Failed++
			if len(s.FirstFailures) < 5 {
				s.FirstFailures = append(s.FirstFailures, fmt.Sprintf("%d at %v", x.code, x.at.Round(time.Millisecond)))
			}
			continue
		case x.code == 429:
			s.Denied++
			sec.Denied++
		default:
			s.OK++
			sec.OK++
		}
		if !r.Target.limited() {
			continue
		}
		c, search, err := parseRequest(x.url)
		if err != nil {
			return nil, err
		}
		refs = w.buckets(c, search, refs[:0])
		for _, b := range refs {
			k := bkey{b.tier, b.key}
			bc := checks[k]
			if bc == nil {
				bc = &bucketCheck{Tier: tiers[b.tier], Key: b.key}
				checks[k] = bc
			}
			bc.Offered++
			if x.code == 200 {
				bc.Admitted++
				if sec.Admitted == nil {
					sec.Admitted = make(map[string]int)
				}
				switch {
				case tiers[b.tier].Scope == "global":
					sec.Admitted["global"]++
				case tiers[b.tier].Scope == "endpoint":
					sec.Admitted["search endpoint"]++
				case tiers[b.tier].Name == "per-user" && b.key == w.user(users):
					sec.Admitted["hot user"]++
				}
			}
		}
	}
	s.Latency = percentilesOf(lat)
	for i := range s.Seconds {
		s.Seconds[i].Latency = percentilesOf(secLat[i])
	}
	for _, bc := range checks {
		bc.Allowed = bc.Tier.allowed(r.Elapsed)
		s.Buckets = append(s.Buckets, *bc)
		if o := bc.Over(); o > 0 {
			s.OverBuckets++
			s.Over += o
		}
	}
	slices.SortFunc(s.Buckets, func(a, b bucketCheck) int {
		if a.Tier.Name != b.Tier.Name {
			if a.Tier.Name < b.Tier.Name {
				return -1
			}
			return 1
		}
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	s.Tiers = make([]tierTotal, len(tiers))
	for i := range tiers {
		s.Tiers[i].Tier = tiers[i]
	}
	for k, bc := range checks {
		tt := &s.Tiers[k.tier]
		tt.Buckets++
		if bc.Offered >= bc.Allowed {
			tt.Saturated++
			tt.SatAdmitted += bc.Admitted
			tt.SatAllow += bc.Allowed
		}
	}
	for _, bc := range s.Buckets {
		switch {
		case bc.Tier.Scope == "global", bc.Tier.Scope == "endpoint",
			bc.Tier.Name == "per-user" && bc.Key == w.user(users),
			bc.Tier.Name == "search" && bc.Key == w.user(users):
			s.Saturated = append(s.Saturated, bc)
		}
	}
	for k, v := range r.Metrics {
		switch k {
		case `rate_limiter_redis_takes_total{via="local"}`:
			s.LocalDenials += v
		case "rate_limiter_rejected_total":
			s.Denials += v
		default:
			if strings.HasPrefix(k, "rate_limiter_errors_total{") {
				s.Degraded += v
			}
		}
	}
	return s, nil
}

// The figures the report derives.

// RedisCPUPercent is the servers' CPU time over the run's wall time.
func (s *summary) RedisCPUPercent() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return 100 * s.RedisCPU.Seconds() / s.Elapsed.Seconds()
}

// RedisCPUPer1k is the servers' CPU time per 1,000 requests.
func (s *summary) RedisCPUPer1k() time.Duration { return per1k(s.RedisCPU, s.Requests) }

// AppCPUPer1k is the instances' CPU time per 1,000 requests.
func (s *summary) AppCPUPer1k() time.Duration { return per1k(s.AppCPU, s.Requests) }

func per1k(d time.Duration, n int) time.Duration {
	if n == 0 {
		return 0
	}
	return time.Duration(float64(d) * 1000 / float64(n))
}

// ScriptsPerRequest is the script calls (round trips deciding buckets)
// per request.
func (s *summary) ScriptsPerRequest() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Scripts) / float64(s.Requests)
}

// CommandsPerRequest is the Redis commands processed per request.
func (s *summary) CommandsPerRequest() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.RedisCommands) / float64(s.Requests)
}

// LocalShare is the share of denials the store answered without Redis.
func (s *summary) LocalShare() float64 {
	if s.Denials == 0 {
		return 0
	}
	return s.LocalDenials / s.Denials
}
