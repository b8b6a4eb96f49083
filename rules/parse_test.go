package rules_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/rules"
	"go.yaml.in/yaml/v3"
)

// everyField sets every field of the schema at least once.
const everyField = `# every field
default_plan: free
reject_unknown_plan: true
rules:
  - key_pattern: "user:{user_id}"
    scope: user
    rate_per_second: 10
    burst_capacity: 50
    plan: free
    description: the seed's free tier
  - key_pattern: "user:{user_id}"
    rate_per_second: 100
    burst_capacity: 500
    plan: pro
  - key_pattern: endpoint:/api/search
    rate_per_second: 1000
    burst_capacity: 2000
    plan: null
  - key_pattern: global
    rate_per_second: 50000
    burst_capacity: 100000
    is_active: false
  - name: slow
    scope: ip
    rate_per_second: 2.5
    burst_capacity: 5
    shadow: true
  - name: queue
    key_pattern: "dim:{tenant}"
    algorithm: shaping
    rate: 100
    period: 1m
    burst_capacity: 10
    max_wait: 500ms
  - name: uploads
    scope: user
    algorithm: fixed_window
    burst_capacity: 100
    window: 24h
    routes: ["POST /upload", "/files/{id}", DELETE]
  - name: sw
    scope: endpoint
    algorithm: sliding_window
    burst_capacity: 60
    window: 1m
  - name: log
    scope: global
    algorithm: sliding_log
    burst_capacity: 3
    window: 1s
`

// rule is what the tests compare of a compiled rule.
type rule struct {
	Name, Scope, Limit, Plan string
	Routes                   []string
	Disabled, Shadow         bool
}

func summary(p *core.Policy) []rule {
	var out []rule
	for _, r := range p.Rules() {
		out = append(out, rule{r.Name, string(r.Scope), r.Limit.String(), r.Plan, r.Routes, r.Disabled, r.Shadow})
	}
	return out
}

var everyFieldWant = []rule{
	{Name: "user.free", Scope: "user", Limit: "token_bucket 10/1s burst 50", Plan: "free"},
	{Name: "user.pro", Scope: "user", Limit: "token_bucket 100/1s burst 500", Plan: "pro"},
	{Name: "endpoint.api.search", Scope: "endpoint", Limit: "token_bucket 1000/1s burst 2000", Routes: []string{"/api/search"}},
	{Name: "global", Scope: "global", Limit: "token_bucket 50000/1s burst 100000", Disabled: true},
	{Name: "slow", Scope: "ip", Limit: "token_bucket 5/2s burst 5", Shadow: true},
	{Name: "queue", Scope: "dim:tenant", Limit: "shaping 100/1m0s burst 10 max wait 500ms"},
	{Name: "uploads", Scope: "user", Limit: "fixed_window 100 per 24h0m0s", Routes: []string{"POST /upload", "/files/{id}", "DELETE"}},
	{Name: "sw", Scope: "endpoint", Limit: "sliding_window 60 per 1m0s"},
	{Name: "log", Scope: "global", Limit: "sliding_log 3 per 1s"},
}

// toJSON converts a YAML document to JSON, for the same cases in both
// formats.
func toJSON(t *testing.T, y string) string {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(y), &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseEveryField(t *testing.T) {
	for _, tc := range []struct{ name, data string }{
		{"limits.yaml", everyField},
		{"limits.YML", everyField},
		{"limits.json", toJSON(t, everyField)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := rules.Parse(tc.name, []byte(tc.data))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := summary(p); !slices.EqualFunc(got, everyFieldWant, func(a, b rule) bool { return fmt.Sprint(a) == fmt.Sprint(b) }) {
				t.Errorf("rules:\n got %+v\nwant %+v", got, everyFieldWant)
			}
			if got, want := p.Plans(), (core.Plans{Default: "free", RejectUnknown: true}); got != want {
				t.Errorf("Plans() = %+v, want %+v", got, want)
			}
		})
	}
}

// A File marshalled to JSON or YAML parses back to the same policy.
func TestFileRoundTrip(t *testing.T) {
	rps := 0.5
	active := false
	n := int64(3)
	f := rules.File{DefaultPlan: "free", Rules: []rules.Spec{
		{KeyPattern: "user:{user_id}", RatePerSecond: &rps, BurstCapacity: 5, Plan: "free", IsActive: &active},
		{Name: "per-ip", Scope: "ip", Rate: &n, Period: rules.Duration(time.Minute), BurstCapacity: 3, Routes: []string{"GET /x"}, Shadow: true},
		{Name: "win", Scope: "global", Algorithm: "sliding_log", BurstCapacity: 9, Window: rules.Duration(time.Second)},
	}}
	want, err := f.Policy()
	if err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"f.json": j, "f.yaml": y} {
		p, err := rules.Parse(name, data)
		if err != nil {
			t.Fatalf("Parse(%s): %v\n%s", name, err, data)
		}
		if got, want := fmt.Sprint(summary(p)), fmt.Sprint(summary(want)); got != want {
			t.Errorf("Parse(%s) = %s, want %s", name, got, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	head := "rules:\n  - name: search\n    scope: ip\n"
	for _, tc := range []struct {
		name  string
		file  string // default limits.yaml
		data  string
		want  string
		is    error
		jsonL int // the line in the JSON form; 0: the case is YAML only
	}{
		{name: "burst zero", data: head + "    rate_per_second: 1\n    burst_capacity: 0\n",
			want: `rules: limits.yaml:5: rule "search": burst_capacity: must be >= 1, got 0`, is: core.ErrInvalidBurst},
		{name: "burst missing", data: head + "    rate_per_second: 1\n",
			want: `rules: limits.yaml:2: rule "search": burst_capacity: must be >= 1, got 0`, is: core.ErrInvalidBurst},
		{name: "unknown field", data: head + "    rate_per_second: 1\n    burst: 5\n",
			want: `rules: limits.yaml:5: rule "search": unknown field "burst" (want algorithm, burst_capacity, description, is_active, key_pattern, max_wait, name, period, plan, rate, rate_per_second, routes, scope, shadow, window)`, is: rules.ErrInvalidSpec},
		{name: "unknown top-level field", data: "default_plans: free\nrules: []\n",
			want: `rules: limits.yaml:1: unknown field "default_plans" (want default_plan, reject_unknown_plan or rules)`, is: rules.ErrInvalidSpec},
		{name: "field twice", data: head + "    scope: user\n",
			want: `rules: limits.yaml:4: rule "search": scope: given twice (first on line 3)`, is: rules.ErrInvalidSpec},
		{name: "no rules", data: "default_plan: free\n",
			want: `rules: limits.yaml:1: missing rules (write "rules: []" for a policy without rules)`, is: rules.ErrInvalidSpec},
		{name: "empty", data: "",
			want: `rules: limits.yaml: empty document: want a mapping with rules ("rules: []" for a policy without rules)`, is: rules.ErrInvalidSpec},
		{name: "rules not a list", data: "rules: {}\n",
			want: `rules: limits.yaml:1: rules: want a list of rules, got a mapping`, is: rules.ErrInvalidSpec},
		{name: "rule not a mapping", data: "rules:\n  - 5\n",
			want: `rules: limits.yaml:2: rule #0: want a mapping of fields, got "5"`, is: rules.ErrInvalidSpec},
		{name: "second document", data: "rules:\n  - {name: a, scope: ip, rate_per_second: 1, burst_capacity: 5}\n---\nrules:\n  - {name: b, scope: user, rate_per_second: 1, burst_capacity: 5}\n",
			want: `rules: limits.yaml:3: a second YAML document starts here: a rules file is one document (put every rule in the first one's rules)`, is: rules.ErrInvalidSpec},
		{name: "second document after an empty one", data: "rules: []\n---\n---\nrules: []\n",
			want: `rules: limits.yaml:3: a second YAML document starts here: a rules file is one document (put every rule in the first one's rules)`, is: rules.ErrInvalidSpec},
		{name: "syntax", data: "rules:\n  - name: a\n    scope: \"b\n",
			want: `rules: limits.yaml:3: invalid YAML: found unexpected end of stream`, is: rules.ErrInvalidSpec},
		{name: "burst not an integer", data: head + "    rate_per_second: 1\n    burst_capacity: \"5\"\n",
			want: `rules: limits.yaml:5: rule "search": burst_capacity: want an integer, got "5"`, is: rules.ErrInvalidSpec},
		{name: "rate not a number", data: head + "    rate_per_second: fast\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: want a number, got "fast"`, is: rules.ErrInvalidSpec},
		{name: "bool", data: head + "    rate_per_second: 1\n    burst_capacity: 5\n    shadow: 1\n",
			want: `rules: limits.yaml:6: rule "search": shadow: want true or false, got "1"`, is: rules.ErrInvalidSpec},
		{name: "bare number duration", data: "rules:\n  - name: a\n    scope: ip\n    rate: 1\n    period: 60\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:5: rule "a": period: want a duration such as "1s", "1m" or "24h", got "60"`, is: rules.ErrInvalidSpec},
		{name: "routes not a list", data: head + "    rate_per_second: 1\n    burst_capacity: 5\n    routes: /x\n",
			want: `rules: limits.yaml:6: rule "search": routes: want a list of route selectors, got "/x"`, is: rules.ErrInvalidSpec},
		{name: "bad route", data: head + "    rate_per_second: 1\n    burst_capacity: 5\n    routes:\n      - /ok\n      - /items/:id\n",
			want: `rules: limits.yaml:8: rule "search": routes[1]: invalid rule: route "/items/:id": segment ":id": write wildcards in braces: "/items/{id}"`, is: core.ErrInvalidRule},
		{name: "chi regexp route", data: head + "    rate_per_second: 1\n    burst_capacity: 5\n    routes:\n      - GET /items/{id:[0-9]+}\n",
			want: `rules: limits.yaml:7: rule "search": routes[0]: invalid rule: route "GET /items/{id:[0-9]+}": wildcard "{id:[0-9]+}": routes leave out chi's regular expressions: "/items/{id}"`, is: core.ErrInvalidRule},
		{name: "no rate", data: head + "    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule "search": rate_per_second: missing: give rate_per_second, or rate and period`, is: core.ErrInvalidRate},
		{name: "both rates", data: head + "    rate_per_second: 1\n    rate: 1\n    period: 1s\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: give rate_per_second or rate and period, not both`, is: core.ErrInvalidRate},
		{name: "rate without period", data: head + "    rate: 3\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule "search": period: missing: rate 3 needs a period ("1s", "1m", ...)`, is: core.ErrInvalidRate},
		{name: "period without rate", data: head + "    period: 1m\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule "search": rate: missing: period 1m0s needs a rate (tokens per period)`, is: core.ErrInvalidRate},
		{name: "rate zero", data: head + "    rate: 0\n    period: 1m\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate: must be >= 1, got 0`, is: core.ErrInvalidRate},
		{name: "rate per second zero", data: head + "    rate_per_second: 0\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: must be > 0, got 0`, is: core.ErrInvalidRate},
		{name: "rate per second inexact", data: head + "    rate_per_second: 0.3333333333333333\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: 0.3333333333333333 per second is not a whole number of tokens per whole number of nanoseconds; write it as rate and period`, is: core.ErrInvalidRate},
		{name: "burst leading zero", data: head + "    rate_per_second: 1\n    burst_capacity: 010\n",
			want: `rules: limits.yaml:5: rule "search": burst_capacity: 010 has a leading zero, which YAML reads as octal, 8: write 10, or 0o10 for octal`, is: rules.ErrInvalidSpec},
		{name: "rate leading zero", data: head + "    rate: 0_10\n    period: 1s\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate: 0_10 has a leading zero, which YAML reads as octal, 8: write 10, or 0o10 for octal`, is: rules.ErrInvalidSpec},
		{name: "rate per second leading zero", data: head + "    rate_per_second: 010\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: 010 has a leading zero, which YAML reads as octal, 8: write 10, or 0o10 for octal`, is: rules.ErrInvalidSpec},
		{name: "leading zero not octal", data: head + "    rate_per_second: 1\n    burst_capacity: 09\n",
			want: `rules: limits.yaml:5: rule "search": burst_capacity: 09 has a leading zero, which YAML keeps for octal: write 9`, is: rules.ErrInvalidSpec},
		{name: "rate per second beyond float64", data: head + "    rate_per_second: 0.10000000000000000001\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: 0.10000000000000000001 has more digits than a float64 holds (it reads as 0.1); write it as rate and period`, is: core.ErrInvalidRate},
		{name: "rate per second infinite", data: head + "    rate_per_second: .inf\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: must be a finite number, got +Inf`, is: core.ErrInvalidRate},
		{name: "rate above 1e9", data: head + "    rate_per_second: 2e9\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": rate_per_second: must be at most 1e9 per second, got 2e+09`, is: core.ErrInvalidRate},
		{name: "fill time beyond 400 days", data: head + "    rate: 1\n    period: 24h\n    burst_capacity: 500\n",
			want: `rules: limits.yaml:6: rule "search": burst_capacity: invalid burst: refilling 500 tokens at 1/24h0m0s takes longer than 400 days`, is: core.ErrInvalidBurst},
		{name: "window on a bucket", data: head + "    rate_per_second: 1\n    burst_capacity: 5\n    window: 1m\n",
			want: `rules: limits.yaml:6: rule "search": window: token_bucket has no window: it refills at rate_per_second (or rate per period) up to burst_capacity`, is: rules.ErrInvalidSpec},
		{name: "rate on a window", data: head + "    algorithm: fixed_window\n    rate_per_second: 1\n    burst_capacity: 5\n    window: 1m\n",
			want: `rules: limits.yaml:5: rule "search": rate_per_second: fixed_window has no rate: it allows burst_capacity per window`, is: rules.ErrInvalidSpec},
		{name: "no window", data: head + "    algorithm: sliding_log\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule "search": window: sliding_log needs a window > 0, got 0s`, is: core.ErrInvalidWindow},
		{name: "window not in ms", data: head + "    algorithm: fixed_window\n    burst_capacity: 5\n    window: 1500us\n",
			want: `rules: limits.yaml:6: rule "search": window: invalid window: window must be a whole number of milliseconds, got 1.5ms`, is: core.ErrInvalidWindow},
		{name: "max wait off shaping", data: head + "    rate_per_second: 1\n    burst_capacity: 5\n    max_wait: 1s\n",
			want: `rules: limits.yaml:6: rule "search": max_wait: only shaping waits; the algorithm is token_bucket`, is: rules.ErrInvalidSpec},
		{name: "shaping without max wait", data: head + "    algorithm: shaping\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule "search": max_wait: shaping needs a max_wait > 0, got 0s`, is: core.ErrInvalidWindow},
		{name: "unknown algorithm", data: head + "    algorithm: leaky\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:4: rule "search": algorithm: unknown algorithm "leaky" (want token_bucket, shaping, fixed_window, sliding_window or sliding_log)`, is: rules.ErrInvalidSpec},
		{name: "unknown scope", data: "rules:\n  - name: a\n    scope: tenant\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:3: rule "a": scope: "tenant" (want user, ip, endpoint, global or dim:NAME)`, is: core.ErrUnknownScope},
		{name: "no scope", data: "rules:\n  - name: a\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule "a": scope: missing: give scope or key_pattern`, is: rules.ErrInvalidSpec},
		{name: "no name", data: "rules:\n  - scope: ip\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule #0: name: missing: give name or key_pattern`, is: rules.ErrInvalidSpec},
		{name: "bad name", data: "rules:\n  - name: a b\n    scope: ip\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule "a b": name: must be 1 to 64 characters of [A-Za-z0-9_.-], got "a b"`, is: core.ErrInvalidRule},
		{name: "bad plan", data: head + "    rate_per_second: 1\n    burst_capacity: 5\n    plan: a/b\n",
			want: `rules: limits.yaml:6: rule "search": plan: must be 1 to 64 characters of [A-Za-z0-9_.-], got "a/b"`, is: core.ErrInvalidRule},
		{name: "scope disagrees", data: "rules:\n  - key_pattern: \"user:{user_id}\"\n    scope: ip\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:3: rule #0: scope: "ip" disagrees with key_pattern "user:{user_id}", which is scope "user"`, is: rules.ErrInvalidSpec},
		{name: "bad key pattern", data: "rules:\n  - key_pattern: \"tenant:{t}\"\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule #0: key_pattern: "tenant:{t}": want "global", "user:{user_id}", "ip:{ip}", "endpoint:{endpoint}", "endpoint:ROUTE" or "dim:{NAME}"`, is: rules.ErrInvalidSpec},
		{name: "user pattern without placeholder", data: "rules:\n  - key_pattern: \"user:42\"\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:2: rule #0: key_pattern: "user:42": a user pattern takes one placeholder, as in "user:{id}"`, is: rules.ErrInvalidSpec},
		{name: "route twice", data: "rules:\n  - key_pattern: endpoint:/a\n    routes: [/b]\n    rate_per_second: 1\n    burst_capacity: 5\n",
			want: `rules: limits.yaml:3: rule #0: routes: key_pattern "endpoint:/a" already restricts the rule to route "/a"; give the route in one place`, is: rules.ErrInvalidSpec},
		{name: "duplicate name", data: "rules:\n  - {name: a, scope: ip, rate_per_second: 1, burst_capacity: 5}\n  - {name: a, scope: user, rate_per_second: 1, burst_capacity: 5, plan: pro}\ndefault_plan: pro\n",
			want: `rules: limits.yaml:3: rule "a": name: "a" is also rule #0's, for plan ""; a name may repeat only on distinct plans`, is: core.ErrDuplicateRule},
		{name: "derived names collide", data: "rules:\n  - {key_pattern: \"endpoint:/a/b\", rate_per_second: 1, burst_capacity: 5}\n  - {key_pattern: \"endpoint:/a.b\", rate_per_second: 1, burst_capacity: 5}\n",
			want: `rules: limits.yaml:3: rule #1: name: the name "endpoint.a.b" derived from key_pattern "endpoint:/a.b" is also rule #0's, for plan ""; give one of them a name`, is: core.ErrDuplicateRule},
		{name: "plans without default", data: "rules:\n  - {key_pattern: \"user:{id}\", rate_per_second: 1, burst_capacity: 5, plan: free}\n",
			want: `rules: limits.yaml: default_plan: missing: the rules name plans ["free"], so a request of no plan or another plan needs default_plan (or reject_unknown_plan: true)`, is: core.ErrInvalidPlan},
		{name: "default plan unknown", data: "default_plan: gold\nrules:\n  - {key_pattern: \"user:{id}\", rate_per_second: 1, burst_capacity: 5, plan: free}\n",
			want: `rules: limits.yaml:1: default_plan: "gold" is not the plan of any rule (the rules name ["free"])`, is: core.ErrInvalidPlan},
		{name: "extension", file: "limits.toml", data: "rules = []",
			want: `rules: limits.toml: unknown extension ".toml": want .yaml, .yml or .json`, is: rules.ErrInvalidSpec},
		{name: "json syntax", file: "limits.json", data: "{\"rules\": [\n  {\"name\": \"a\",}\n]}",
			want: `rules: limits.json:2: invalid JSON: invalid character '}' looking for beginning of object key string`, is: rules.ErrInvalidSpec},
		{name: "json unknown field", file: "limits.json", data: "{\"rules\": [\n  {\"name\": \"a\",\n   \"scope\": \"ip\",\n   \"burts_capacity\": 5}\n]}",
			want: `rules: limits.json:4: rule "a": unknown field "burts_capacity" (want algorithm, burst_capacity, description, is_active, key_pattern, max_wait, name, period, plan, rate, rate_per_second, routes, scope, shadow, window)`, is: rules.ErrInvalidSpec},
		{name: "json quoted number", file: "limits.json", data: "{\"rules\": [\n  {\"name\": \"a\", \"scope\": \"ip\",\n   \"rate_per_second\": \"1\", \"burst_capacity\": 5}\n]}",
			want: `rules: limits.json:3: rule "a": rate_per_second: want a number, got "1"`, is: rules.ErrInvalidSpec},
		{name: "json fractional burst", file: "limits.json", data: "{\"rules\": [\n  {\"name\": \"a\", \"scope\": \"ip\", \"rate_per_second\": 1,\n   \"burst_capacity\": 5.5}\n]}",
			want: `rules: limits.json:3: rule "a": burst_capacity: want an integer, got "5.5"`, is: rules.ErrInvalidSpec},
		{name: "json field twice", file: "limits.json", data: "{\"rules\": [],\n \"rules\": []}",
			want: `rules: limits.json:2: rules: given twice (first on line 1)`, is: rules.ErrInvalidSpec},
		{name: "json trailing data", file: "limits.json", data: "{\"rules\": []}\n{}",
			want: `rules: limits.json:2: invalid JSON: data after the document: {`, is: rules.ErrInvalidSpec},
		{name: "json truncated", file: "limits.json", data: "{\"rules\": [\n",
			want: `rules: limits.json:2: invalid JSON: unexpected end of input`, is: rules.ErrInvalidSpec},
		{name: "json top level", file: "limits.json", data: "[]",
			want: `rules: limits.json:1: the top level must be a mapping with default_plan, reject_unknown_plan and rules, got a list`, is: rules.ErrInvalidSpec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := tc.file
			if file == "" {
				file = "limits.yaml"
			}
			_, err := rules.Parse(file, []byte(tc.data))
			if err == nil {
				t.Fatalf("Parse succeeded, want %s", tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("Parse error\n got %s\nwant %s", err, tc.want)
			}
			if !errors.Is(err, tc.is) {
				t.Errorf("Parse error %v does not wrap %v", err, tc.is)
			}
			var e *rules.Error
			if !errors.As(err, &e) || e.File != file {
				t.Errorf("Parse error %#v is not an *Error naming %s", err, file)
			}
		})
	}
}

// An integer with a base prefix is read in that base; only a leading zero,
// octal to YAML 1.1 and decimal to a person, is an error (TestParseErrors).
func TestParseIntegerBases(t *testing.T) {
	for _, tc := range []struct{ fields, want string }{
		{"rate_per_second: 1, burst_capacity: 1_000", "token_bucket 1/1s burst 1000"},
		{"rate_per_second: 1, burst_capacity: 0o10", "token_bucket 1/1s burst 8"},
		{"rate_per_second: 1, burst_capacity: 0x10", "token_bucket 1/1s burst 16"},
		{"rate_per_second: 1, burst_capacity: 0b10", "token_bucket 1/1s burst 2"},
		{"rate_per_second: 0o10, burst_capacity: 1", "token_bucket 8/1s burst 1"},
		{"rate_per_second: 0x10, burst_capacity: 1", "token_bucket 16/1s burst 1"},
		{"rate: 0o10, period: 1s, burst_capacity: 1", "token_bucket 8/1s burst 1"},
		{"rate_per_second: 0.5, burst_capacity: 1", "token_bucket 1/2s burst 1"},
	} {
		p, err := rules.Parse("limits.yaml", []byte("rules:\n  - {name: a, scope: ip, "+tc.fields+"}\n"))
		if err != nil {
			t.Errorf("%s: %v", tc.fields, err)
			continue
		}
		if got := p.Rules()[0].Limit.String(); got != tc.want {
			t.Errorf("%s: limit %s, want %s", tc.fields, got, tc.want)
		}
	}
}

// TestParseTrailingMarker: a file that ends with "---", alone or with a
// comment, holds one document of rules; nothing is dropped.
func TestParseTrailingMarker(t *testing.T) {
	const rule = "rules:\n  - {name: a, scope: ip, rate_per_second: 1, burst_capacity: 5}\n"
	for _, tail := range []string{"---\n", "---", "---\n# end\n", "---\nnull\n", "...\n"} {
		p, err := rules.Parse("limits.yaml", []byte(rule+tail))
		if err != nil || len(p.Rules()) != 1 {
			t.Errorf("rules then %q: %v, %v; want the one rule", tail, p, err)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(path, []byte(everyField), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := rules.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got := len(p.Rules()); got != len(everyFieldWant) {
		t.Errorf("Load: %d rules, want %d", got, len(everyFieldWant))
	}
	_, err = rules.Load(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "rules: "+filepath.Join(dir, "missing.yaml")+": ") {
		t.Errorf("Load(missing) = %v, want an error wrapping os.ErrNotExist naming the file", err)
	}
}

func TestRatePerSecond(t *testing.T) {
	for _, tc := range []struct {
		rps  float64
		want core.Rate
		err  bool
	}{
		{0.5, core.Rate{N: 1, Per: 2 * time.Second}, false},
		{2.5, core.Rate{N: 5, Per: 2 * time.Second}, false},
		{1000, core.Rate{N: 1000, Per: time.Second}, false},
		{0.1, core.Rate{N: 1, Per: 10 * time.Second}, false},
		{0.001, core.Rate{N: 1, Per: 1000 * time.Second}, false},
		{10.25, core.Rate{N: 41, Per: 4 * time.Second}, false},
		{1e9, core.Rate{N: 1e9, Per: time.Second}, false},
		{1.0 / 3, core.Rate{}, true},
		{0, core.Rate{}, true},
		{-1, core.Rate{}, true},
		{math.NaN(), core.Rate{}, true},
		{math.Inf(1), core.Rate{}, true},
		{1e9 + 1, core.Rate{}, true},
	} {
		rps := tc.rps
		rs, err := rules.CompileRules([]rules.Spec{{Name: "r", Scope: "global", RatePerSecond: &rps, BurstCapacity: 1}})
		switch {
		case tc.err && err == nil:
			t.Errorf("rate_per_second %v = %v, want an error", tc.rps, rs[0].Limit.Rate())
		case tc.err && !errors.Is(err, core.ErrInvalidRate):
			t.Errorf("rate_per_second %v: error %v does not wrap core.ErrInvalidRate", tc.rps, err)
		case tc.err && !strings.Contains(err.Error(), `rule "r": rate_per_second: `):
			t.Errorf("rate_per_second %v: error %v names no rule and field", tc.rps, err)
		case !tc.err && err != nil:
			t.Errorf("rate_per_second %v: %v", tc.rps, err)
		case !tc.err && rs[0].Limit.Rate() != tc.want:
			t.Errorf("rate_per_second %v = %v, want %v", tc.rps, rs[0].Limit.Rate(), tc.want)
		}
	}
}

func TestDerivedNames(t *testing.T) {
	long := "endpoint:/" + strings.Repeat("segment/", 10) + "end"
	for _, tc := range []struct{ pattern, plan, want string }{
		{"user:{user_id}", "free", "user.free"},
		{"user:{user_id}", "pro", "user.pro"},
		{"user:{id}", "", "user"},
		{"ip:{ip}", "", "ip"},
		{"global", "", "global"},
		{"endpoint:{endpoint}", "", "endpoint"},
		{"endpoint:/api/search", "", "endpoint.api.search"},
		{"endpoint:GET /items/{id}", "enterprise", "endpoint.GET.items.id.enterprise"},
		{"endpoint:/", "", "endpoint.root"},
		{"dim:{tenant}", "pro", "dim.tenant.pro"},
		{long, "", "endpoint.segment.segment.segment.segment.segment.segmen-"},
	} {
		rs, err := rules.CompileRules([]rules.Spec{{KeyPattern: tc.pattern, Plan: tc.plan, Rate: new(int64(1)), Period: rules.Duration(time.Second), BurstCapacity: 1}})
		if err != nil {
			t.Errorf("key_pattern %q plan %q: %v", tc.pattern, tc.plan, err)
			continue
		}
		got := rs[0].Name
		if tc.pattern == long {
			if len(got) != 64 || !strings.HasPrefix(got, tc.want) || strings.Trim(got[56:], "0123456789abcdef") != "" {
				t.Errorf("key_pattern %q: name %q, want 64 characters: %q and 8 hex digits", tc.pattern, got, tc.want)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("key_pattern %q plan %q: name %q, want %q", tc.pattern, tc.plan, got, tc.want)
		}
	}
}

// A clash of names is reported at the rule that clashes, whose position
// Index gives, with the earlier rule's in its DuplicateError; a name may
// repeat on distinct plans.
func TestCompileRulesClash(t *testing.T) {
	spec := func(name, pattern, plan string) rules.Spec {
		return rules.Spec{Name: name, KeyPattern: pattern, Plan: plan, Rate: new(int64(1)), Period: rules.Duration(time.Second), BurstCapacity: 1}
	}
	for _, tc := range []struct {
		name  string
		specs []rules.Spec
		index int
		want  rules.DuplicateError
	}{
		{"on every plan", []rules.Spec{spec("x", "user:{id}", "free"), spec("x", "ip:{ip}", "pro"), spec("x", "global", "")},
			2, rules.DuplicateError{Name: "x", Other: 0, Plan: "free"}},
		{"on one plan", []rules.Spec{spec("x", "user:{id}", "free"), spec("y", "global", ""), spec("x", "ip:{ip}", "pro"), spec("x", "dim:{t}", "pro")},
			3, rules.DuplicateError{Name: "x", Other: 2, Plan: "pro"}},
		{"derived", []rules.Spec{spec("", "endpoint:/a/b", ""), spec("", "endpoint:/a.b", "")},
			1, rules.DuplicateError{Name: "endpoint.a.b", Derived: "endpoint:/a.b", Other: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rules.CompileRules(tc.specs)
			e, ok := errors.AsType[*rules.Error](err)
			if !ok {
				t.Fatalf("CompileRules = %v, want an *Error", err)
			}
			if i, ok := e.Index(); i != tc.index || !ok {
				t.Errorf("Index() = %d, %v, want %d, true", i, ok, tc.index)
			}
			d, ok := errors.AsType[*rules.DuplicateError](err)
			if !ok || *d != tc.want || !errors.Is(err, core.ErrDuplicateRule) {
				t.Errorf("CompileRules = %v, want a DuplicateError %+v wrapping core.ErrDuplicateRule", err, tc.want)
			}
		})
	}
	_, err := rules.Compile([]rules.Spec{spec("x", "user:{id}", "free")})
	if e, ok := errors.AsType[*rules.Error](err); !ok || e.Field != "default_plan" {
		t.Fatalf("Compile without default_plan = %v, want an *Error about default_plan", err)
	} else if i, ok := e.Index(); ok {
		t.Errorf("Index() of an error about default_plan = %d, true, want false", i)
	}
}

// The seed's four example rows compile as a table adapter would pass them.
func TestCompileSeedRows(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	p, err := rules.Compile([]rules.Spec{
		{KeyPattern: "user:{user_id}", Scope: "user", RatePerSecond: f(10), BurstCapacity: 50, Plan: "free"},
		{KeyPattern: "user:{user_id}", Scope: "user", RatePerSecond: f(100), BurstCapacity: 500, Plan: "pro"},
		{KeyPattern: "endpoint:/api/search", Scope: "endpoint", RatePerSecond: f(1000), BurstCapacity: 2000},
		{KeyPattern: "global", Scope: "global", RatePerSecond: f(50000), BurstCapacity: 100000},
	}, rules.WithPlans(core.Plans{Default: "free"}))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range p.Rules() {
		names = append(names, r.Name)
	}
	if want := []string{"user.free", "user.pro", "endpoint.api.search", "global"}; !slices.Equal(names, want) {
		t.Errorf("names %q, want %q", names, want)
	}
	if _, err := rules.Compile(nil, nil); !errors.Is(err, core.ErrInvalidOption) {
		t.Errorf("Compile(nil option) = %v, want ErrInvalidOption", err)
	}
	_, err = rules.Compile([]rules.Spec{{Name: "a", Scope: "ip", BurstCapacity: 1}})
	if want := `rules: rule "a": rate_per_second: missing: give rate_per_second, or rate and period`; err == nil || err.Error() != want {
		t.Errorf("Compile error %v, want %s", err, want)
	}
}
