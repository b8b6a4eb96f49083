package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// limitsFile is a rules file of every kind of rule the command prints.
const limitsFile = "testdata/limits.yaml"

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
	good := limitsFile
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
	t.Setenv(secretEnv, "") // the runner's own would change "missing secret file"
	rulesFile := limitsFile
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
		{"missing secret file", []string{"inspect", "-redis", "127.0.0.1:1", "-rules", rulesFile, "-rule", "search", "-key", "/x", "-secret-file", rulesFile + ".missing"}, 1,
			"ratelimit: -secret-file: open " + rulesFile + ".missing: "},
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
