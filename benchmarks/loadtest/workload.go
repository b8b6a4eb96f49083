package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The plans of the load test's policy. Anonymous requests (no X-User) send
// no X-Plan and get the default plan, anonymous, whose only own tier is per
// IP.
const (
	planFree      = "free"
	planPro       = "pro"
	planAnonymous = "anonymous"
)

// A tier is one rule of the load test's policy, in the numbers the exact
// math needs: Rate tokens every Period, Burst at once.
type tier struct {
	Name   string
	Scope  string // user, ip, endpoint, global
	Plan   string // "": every plan
	Search bool   // only GET /search
	Rate   int64
	Period time.Duration
	Burst  int64
}

// tiers is the load test's policy, which rulesYAML writes for the servers
// and the checks read. A request passes every tier that applies to it, all
// or nothing.
var tiers = []tier{
	{Name: "per-user", Scope: "user", Plan: planFree, Rate: 1, Period: time.Second, Burst: 5},
	{Name: "per-user", Scope: "user", Plan: planPro, Rate: 10, Period: time.Second, Burst: 20},
	{Name: "search", Scope: "user", Plan: planFree, Search: true, Rate: 1, Period: 2 * time.Second, Burst: 2},
	{Name: "search", Scope: "user", Plan: planPro, Search: true, Rate: 2, Period: time.Second, Burst: 5},
	{Name: "per-ip", Scope: "ip", Plan: planAnonymous, Rate: 20, Period: time.Second, Burst: 40},
	{Name: "search-endpoint", Scope: "endpoint", Search: true, Rate: 300, Period: time.Second, Burst: 300},
	{Name: "global", Scope: "global", Rate: 1200, Period: time.Second, Burst: 1200},
}

// rulesYAML returns the rules file (package rules' schema) of tiers.
func rulesYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The load test's policy (benchmarks/loadtest/workload.go).\ndefault_plan: %s\nrules:\n", planAnonymous)
	for _, t := range tiers {
		fmt.Fprintf(&b, "  - name: %s\n    scope: %s\n    rate: %d\n    period: %s\n    burst_capacity: %d\n", t.Name, t.Scope, t.Rate, t.Period, t.Burst)
		if t.Plan != "" {
			fmt.Fprintf(&b, "    plan: %s\n", t.Plan)
		}
		if t.Search {
			b.WriteString("    routes: [\"GET /search\"]\n")
		}
	}
	return b.String()
}

// allowed is the most requests the exact math admits into one bucket of t
// over elapsed, starting full: the burst, and one token every Period/Rate.
func (t tier) allowed(elapsed time.Duration) int64 {
	if elapsed < 0 {
		elapsed = 0
	}
	return t.Burst + int64(float64(elapsed)*float64(t.Rate)/float64(t.Period))
}

// A caller is who sends a request: a user (index < users, or the hot user
// at index users) or an anonymous client from one of the anonymous IPs.
type caller struct {
	user int // -1: anonymous
	ip   int // anonymous only: the index of its source address
}

// The workload's shape: its shares of the requests.
const (
	hotUserShare   = 0.05 // the hot user (pro plan)
	anonymousShare = 0.15 // anonymous clients, spread over anonymousIPs
	searchShare    = 0.40 // requests to GET /search, the hot endpoint
	anonymousIPs   = 10
	proEvery       = 5 // every 5th user is on the pro plan
)

// workload makes the requests of one run: users on the free and pro plans,
// a hot user, anonymous clients from their own loopback addresses, and a
// hot endpoint, spread round-robin over the instances like a load balancer
// would. It is safe for concurrent use (vegeta calls it from its workers).
type workload struct {
	bases []string // the instances' base URLs
	users int
	n     atomic.Uint64
	seed  uint64
}

// user returns the name of user i; the hot user is users.
func (w *workload) user(i int) string {
	if i == w.users {
		return "user-hot"
	}
	return "user-" + strconv.Itoa(i)
}

// plan returns the plan of user i: the hot user and every proEvery-th user
// are on pro.
func (w *workload) plan(i int) string {
	if i == w.users || i%proEvery == 0 {
		return planPro
	}
	return planFree
}

// anonymousIP returns the source address of anonymous IP i: 127.0.1.(i+1),
// a loopback address of its own (Linux routes all of 127.0.0.0/8 to lo).
func anonymousIP(i int) string { return "127.0.1." + strconv.Itoa(i+1) }

// targeter returns the vegeta targeter of w. The request's caller and route
// are in its URL (u= or ip=, and the path), which the results keep, so the
// checks know which buckets each admitted request took from; the servers
// ignore the query.
func (w *workload) targeter() vegeta.Targeter {
	return func(t *vegeta.Target) error {
		n := w.n.Add(1) - 1
		r := rand.New(rand.NewPCG(w.seed, n))
		var c caller
		switch x := r.Float64(); {
		case x < hotUserShare:
			c = caller{user: w.users}
		case x < hotUserShare+anonymousShare:
			c = caller{user: -1, ip: r.IntN(anonymousIPs)}
		default:
			c = caller{user: r.IntN(w.users)}
		}
		search := r.Float64() < searchShare
		var b strings.Builder
		b.WriteString(w.bases[n%uint64(len(w.bases))])
		if search {
			b.WriteString("/search?q=go&")
		} else {
			b.WriteString("/items/")
			b.WriteString(strconv.Itoa(r.IntN(1000)))
			b.WriteString("?")
		}
		t.Method = http.MethodGet
		t.Header = http.Header{}
		if c.user < 0 {
			b.WriteString("ip=")
			b.WriteString(strconv.Itoa(c.ip))
		} else {
			b.WriteString("u=")
			b.WriteString(strconv.Itoa(c.user))
			t.Header.Set("X-User", w.user(c.user))
			t.Header.Set("X-Plan", w.plan(c.user))
		}
		t.URL = b.String()
		return nil
	}
}

// parseRequest reads back what targeter put in a URL: the caller and
// whether the request was a search.
func parseRequest(raw string) (c caller, search bool, err error) {
	path, query, ok := strings.Cut(raw, "?")
	if !ok {
		return c, false, fmt.Errorf("loadtest: %q: no query", raw)
	}
	search = strings.HasSuffix(path, "/search")
	for kv := range strings.SplitSeq(query, "&") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "u":
			c.user, err = strconv.Atoi(v)
			return c, search, err
		case "ip":
			c.user = -1
			c.ip, err = strconv.Atoi(v)
			return c, search, err
		}
	}
	return c, false, fmt.Errorf("loadtest: %q: no caller", raw)
}

// buckets returns the buckets a request of c takes a token from when it is
// admitted, as "rule/identity" strings, and the tier of each.
func (w *workload) buckets(c caller, search bool, out []bucketRef) []bucketRef {
	plan, id := planAnonymous, ""
	if c.user >= 0 {
		plan, id = w.plan(c.user), w.user(c.user)
	}
	for i := range tiers {
		t := &tiers[i]
		if (t.Plan != "" && t.Plan != plan) || (t.Search && !search) {
			continue
		}
		var key string
		switch t.Scope {
		case "user":
			if c.user < 0 {
				continue // anonymous: no user, the tier does not apply
			}
			key = id
		case "ip":
			key = anonymousIP(c.ip)
			if c.user >= 0 {
				key = "127.0.0.1"
			}
		case "endpoint":
			key = "GET /search"
		case "global":
			key = ""
		}
		out = append(out, bucketRef{tier: i, key: key})
	}
	return out
}

// A bucketRef names one bucket: a tier and the identity it counts.
type bucketRef struct {
	tier int
	key  string
}

// client returns the HTTP client of the load generator: anonymous requests
// (ip= in the query) leave from their own loopback address, every other
// request from 127.0.0.1. Connections are kept alive and reused.
func client(timeout time.Duration) *http.Client {
	newTransport := func(src string) *http.Transport {
		d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
		if src != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
		}
		return &http.Transport{
			DialContext:         d.DialContext,
			MaxIdleConns:        0,
			MaxIdleConnsPerHost: 10000,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		}
	}
	r := &sourceRouter{def: newTransport("")}
	for i := range anonymousIPs {
		r.bySource = append(r.bySource, newTransport(anonymousIP(i)))
	}
	return &http.Client{Transport: r, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// sourceRouter sends each request through the transport of its source
// address.
type sourceRouter struct {
	def      *http.Transport
	bySource []*http.Transport
}

func (s *sourceRouter) RoundTrip(r *http.Request) (*http.Response, error) {
	if q := r.URL.RawQuery; strings.Contains(q, "ip=") {
		_, v, _ := strings.Cut(q, "ip=")
		if i, err := strconv.Atoi(v); err == nil && i >= 0 && i < len(s.bySource) {
			return s.bySource[i].RoundTrip(r)
		}
	}
	return s.def.RoundTrip(r)
}

// CloseIdleConnections closes every transport's idle connections.
func (s *sourceRouter) CloseIdleConnections() {
	s.def.CloseIdleConnections()
	for _, t := range s.bySource {
		t.CloseIdleConnections()
	}
}

// checkLoopback fails unless every source address can connect to a
// loopback listener: the anonymous clients need 127.0.1.x, which Linux
// routes to lo.
func checkLoopback(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for i := range anonymousIPs {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(anonymousIP(i))}, Timeout: time.Second}
		c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
		if err != nil {
			return fmt.Errorf("loadtest: anonymous clients leave from %s, which this machine cannot use as a source address: %w", anonymousIP(i), err)
		}
		c.Close()
	}
	return nil
}
