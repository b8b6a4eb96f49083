package rules_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/rules"
)

// The seed's four example rules, as a YAML file.
const seedYAML = `default_plan: free
rules:
  - key_pattern: "user:{user_id}"
    rate_per_second: 10
    burst_capacity: 50
    plan: free
  - key_pattern: "user:{user_id}"
    rate_per_second: 100
    burst_capacity: 500
    plan: pro
  - key_pattern: "endpoint:/api/search"
    rate_per_second: 1000
    burst_capacity: 2000
  - key_pattern: global
    rate_per_second: 0.5
    burst_capacity: 100
    shadow: true
`

func ExampleParse() {
	policy, err := rules.Parse("limits.yaml", []byte(seedYAML))
	if err != nil {
		panic(err)
	}
	for _, r := range policy.Rules() {
		fmt.Printf("%-20s %-8s %-32v plan=%q routes=%q shadow=%v\n", r.Name, r.Scope, r.Limit, r.Plan, r.Routes, r.Shadow)
	}
	fmt.Println("default plan:", policy.Plans().Default)
	// Output:
	// user.free            user     token_bucket 10/1s burst 50      plan="free" routes=[] shadow=false
	// user.pro             user     token_bucket 100/1s burst 500    plan="pro" routes=[] shadow=false
	// endpoint.api.search  endpoint token_bucket 1000/1s burst 2000  plan="" routes=["/api/search"] shadow=false
	// global               global   token_bucket 1/2s burst 100      plan="" routes=[] shadow=true
	// default plan: free
}

// A mistake is reported with the file, the line, the rule and the field,
// and wraps a sentinel error.
func ExampleParse_error() {
	_, err := rules.Parse("limits.json", []byte(`{
  "rules": [
    {"name": "search", "scope": "endpoint",
     "rate_per_second": 2.5,
     "burst_capacity": 0}
  ]
}`))
	fmt.Println(err)
	fmt.Println(errors.Is(err, core.ErrInvalidBurst))
	// Output:
	// rules: limits.json:5: rule "search": burst_capacity: must be >= 1, got 0
	// true
}

func ExampleLoad() {
	path := filepath.Join(os.TempDir(), "rules-example-limits.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  - name: per-ip\n    scope: ip\n    rate: 100\n    period: 1m\n    burst_capacity: 20\n"), 0o600); err != nil {
		panic(err)
	}
	defer os.Remove(path)
	policy, err := rules.Load(path)
	if err != nil {
		panic(err)
	}
	limiter, err := core.NewLimiter(policy)
	if err != nil {
		panic(err)
	}
	fmt.Println(policy.Rules()[0].Limit, limiter.Policy() == policy)
	// Output:
	// token_bucket 100/1m0s burst 20 true
}

// Watch keeps the limiter's policy in step with the file; Reload applies
// it at once, as a SIGHUP handler would.
func ExampleWatch() {
	dir, err := os.MkdirTemp("", "rules-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "limits.yaml")
	write := func(burst int) {
		data := fmt.Sprintf("rules:\n  - name: per-user\n    scope: user\n    rate_per_second: 10\n    burst_capacity: %d\n", burst)
		if err := os.WriteFile(path+".tmp", []byte(data), 0o600); err != nil {
			panic(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			panic(err)
		}
	}
	write(50)
	limiter, err := core.NewLimiter(&core.Policy{})
	if err != nil {
		panic(err)
	}
	w, err := rules.Watch(path, limiter)
	if err != nil {
		panic(err)
	}
	defer w.Close()
	fmt.Println(limiter.Policy().Rules()[0].Limit)

	write(80)
	if err := w.Reload(); err != nil {
		panic(err)
	}
	fmt.Println(limiter.Policy().Rules()[0].Limit)

	write(0) // a bad file: the policy in force stays
	err = w.Reload()
	var e *rules.Error
	if errors.As(err, &e) {
		fmt.Printf("line %d, rule %q, field %s: %v\n", e.Line, e.Rule, e.Field, errors.Is(err, core.ErrInvalidBurst))
	}
	fmt.Println(limiter.Policy().Rules()[0].Limit)
	// Output:
	// token_bucket 10/1s burst 50
	// token_bucket 10/1s burst 80
	// line 5, rule "per-user", field burst_capacity: true
	// token_bucket 10/1s burst 80
}
