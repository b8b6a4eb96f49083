package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
	"github.com/bucketry/ratelimit/rules"
	"github.com/redis/go-redis/v9"
)

const limitsYAML = `default_plan: free
rules:
  - key_pattern: "user:{user_id}"
    rate: 1
    period: 1h
    burst_capacity: 10
    plan: free
  - key_pattern: "user:{user_id}"
    rate_per_second: 100
    burst_capacity: 500
    plan: pro
  - name: search
    key_pattern: "endpoint:/api/search"
    rate_per_second: 0.5
    burst_capacity: 20
    shadow: true
  - key_pattern: global
    rate_per_second: 50000
    burst_capacity: 100000
    is_active: false
`

func writeFile(t *testing.T, name, data string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCmd runs the command line and returns its status and output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidate(t *testing.T) {
	good := writeFile(t, "limits.yaml", limitsYAML)
	code, out, errOut := runCmd(t, "validate", good)
	if code != 0 || errOut != "" {
		t.Fatalf("validate good file: status %d, stderr %q", code, errOut)
	}
	want := good + `: 4 rules, default plan "free"
NAME       SCOPE     LIMIT                               PLAN  ROUTES       SHADOW  ACTIVE
user.free  user      token_bucket 1/1h0m0s burst 10      free  *            false   true
user.pro   user      token_bucket 100/1s burst 500       pro   *            false   true
search     endpoint  token_bucket 1/2s burst 20          *     /api/search  true    true
global     global    token_bucket 50000/1s burst 100000  *     *            false   false
`
	if out != want {
		t.Errorf("validate output:\n%s\nwant:\n%s", out, want)
	}

	bad := writeFile(t, "bad.json", "{\"rules\": [\n  {\"name\": \"a\", \"scope\": \"ip\",\n   \"rate_per_second\": 1, \"burst_capacity\": 0}\n]}\n")
	code, out, errOut = runCmd(t, "validate", good, bad)
	if code != 1 {
		t.Errorf("validate with a bad file: status %d, want 1", code)
	}
	if wantErr := "rules: " + bad + `:3: rule "a": burst_capacity: must be >= 1, got 0` + "\nratelimit: 1 of 2 files invalid\n"; errOut != wantErr {
		t.Errorf("validate stderr %q, want %q", errOut, wantErr)
	}
	if !strings.HasPrefix(out, good+": 4 rules") {
		t.Errorf("validate did not print the good file: %q", out)
	}
}

func TestUsage(t *testing.T) {
	rulesFile := writeFile(t, "limits.yaml", limitsYAML)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no command", nil, 2, "usage:"},
		{"unknown command", []string{"frobnicate"}, 2, `ratelimit: unknown command "frobnicate"`},
		{"validate nothing", []string{"validate"}, 2, "ratelimit: validate: no file given"},
		{"missing flags", []string{"inspect", "-rule", "x"}, 2, "ratelimit: inspect: missing -redis, -rules"},
		{"unknown flag", []string{"reset", "-bogus"}, 2, "flag provided but not defined: -bogus"},
		{"unknown rule", []string{"inspect", "-redis", "127.0.0.1:1", "-rules", rulesFile, "-rule", "nope", "-key", "a"}, 2,
			`ratelimit: no rule "nope" (the rules are ["user.free" "user.pro" "search" "global"])`},
		{"missing key", []string{"inspect", "-redis", "127.0.0.1:1", "-rules", rulesFile, "-rule", "search"}, 2,
			`ratelimit: inspect: missing -key (rule "search" counts per endpoint)`},
		{"bad rules file", []string{"inspect", "-redis", "127.0.0.1:1", "-rules", rulesFile + ".missing", "-rule", "x", "-key", "a"}, 1,
			"ratelimit: rules: " + rulesFile + ".missing: open "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, errOut := runCmd(t, tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.msg) {
				t.Errorf("status %d, stderr %q; want %d and %q", code, errOut, tc.code, tc.msg)
			}
		})
	}
}

// Tokens taken through a limiter on a real Redis show in inspect; reset
// fills the bucket again.
func TestInspectReset(t *testing.T) {
	srv := redistest.Standalone(t)
	rulesFile := writeFile(t, "limits.yaml", limitsYAML)
	policy, err := rules.Load(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "{cli}"
	store, err := goredis.Open(&redis.UniversalOptions{Addrs: []string{srv.Addr}}, goredis.WithPrefix(prefix), goredis.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	limiter, err := core.NewLimiter(policy, core.WithStore(store), core.WithFailureMode(core.FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := limiter.Allow(context.Background(), core.Request{User: "alice", Plan: "free"})
		if err != nil || !d.Allowed || d.Rule != "user.free" {
			t.Fatalf("Allow #%d = %+v, %v", i, d, err)
		}
	}

	args := func(cmd string) []string {
		return []string{cmd, "-redis", srv.Addr, "-prefix", prefix, "-rules", rulesFile, "-rule", "user.free", "-key", "alice"}
	}
	inspect := func(wantRemaining string) {
		t.Helper()
		code, out, errOut := runCmd(t, args("inspect")...)
		if code != 0 {
			t.Fatalf("inspect: status %d, stderr %q", code, errOut)
		}
		t.Logf("inspect:\n%s", out)
		if !strings.Contains(out, "remaining: "+wantRemaining+" of 10\n") {
			t.Errorf("inspect output:\n%s\nwant remaining: %s of 10", out, wantRemaining)
		}
		if !strings.Contains(out, "redis key: "+store.Key("user.free", "alice")+"\n") {
			t.Errorf("inspect output:\n%s\nwant the redis key %s", out, store.Key("user.free", "alice"))
		}
	}
	inspect("7")
	inspect("7") // inspecting consumes nothing

	code, out, errOut := runCmd(t, args("reset")...)
	if code != 0 || !strings.Contains(out, "reset "+store.Key("user.free", "alice")) {
		t.Fatalf("reset: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	inspect("10")
	if !strings.Contains(mustOut(t, args("inspect")...), "reset in:  0s\n") {
		t.Error("a reset bucket is not full now")
	}

	// The limiter sees the full bucket too.
	d, err := limiter.Allow(context.Background(), core.Request{User: "alice", Plan: "free"})
	if err != nil || d.Remaining != 9 {
		t.Errorf("Allow after reset = remaining %d, %v; want 9", d.Remaining, err)
	}

	// A global rule's bucket is "*" by default; an unreachable Redis is status 1.
	if code, out, errOut := runCmd(t, "inspect", "-redis", srv.Addr, "-rules", rulesFile, "-rule", "global"); code != 0 || !strings.Contains(out, "key:       *\n") {
		t.Errorf("inspect global: status %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCmd(t, "inspect", "-redis", "127.0.0.1:1", "-timeout", "200ms", "-rules", rulesFile, "-rule", "global"); code != 1 || !strings.Contains(errOut, "ratelimit: inspect ratelimit:") {
		t.Errorf("inspect on a closed port: status %d, stderr %q; want 1 and the failure", code, errOut)
	}
}

func mustOut(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("%q: status %d, stderr %q", args, code, errOut)
	}
	return out
}
