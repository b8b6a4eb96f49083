package ratelimittest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bucketry/ratelimit/adapters/goredis"
	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redistest"
	"github.com/bucketry/ratelimit/rules"
)

// limitsFile is the command module's test rules file.
const limitsFile = "../testdata/limits.yaml"

// command is the ratelimit command, built once for the tests.
var command string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ratelimit-cmd-")
	if err != nil {
		panic(err)
	}
	command = filepath.Join(dir, "ratelimit")
	build := exec.Command("go", "build", "-o", command, "github.com/bucketry/ratelimit/cmd/ratelimit")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		panic("go build of the ratelimit command: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// runCmd runs the command with args and returns its exit status and
// output.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runEnv(t, nil, args...)
}

// runEnv runs the command as runCmd does, with env ("NAME=value") added to
// the environment.
func runEnv(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(command, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	}
	t.Fatalf("run %s: %v", command, err)
	return 0, "", ""
}

func mustOut(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("%q: status %d, stderr %q", args, code, errOut)
	}
	return out
}

// takeThree opens a store on the Redis at addr with opts, makes a limiter
// of the test rules on it, and takes 3 of the 10 tokens of alice's
// user.free bucket.
func takeThree(t *testing.T, addr string, opts ...goredis.Option) (*goredis.Store, *core.Limiter) {
	t.Helper()
	policy, err := rules.Load(limitsFile)
	if err != nil {
		t.Fatal(err)
	}
	store, err := goredis.Open(&redis.UniversalOptions{Addrs: []string{addr}}, append(opts, goredis.WithTimeout(time.Second))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
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
	return store, limiter
}

// Tokens taken through a limiter on a real Redis show in inspect; reset
// fills the bucket again.
func TestInspectReset(t *testing.T) {
	srv := redistest.Standalone(t)
	rulesFile := limitsFile
	const prefix = "{cli}"
	store, limiter := takeThree(t, srv.Addr, goredis.WithPrefix(prefix))

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

// Against a store that hashes identities, inspect and reset given its
// secret, in a file or in the environment, act on the bucket the limiter
// uses.
func TestInspectResetHashedIdentities(t *testing.T) {
	srv := redistest.Standalone(t)
	secret := "a secret that ends in a newline\n"
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	store, limiter := takeThree(t, srv.Addr, goredis.WithHashedIdentities([]byte(secret)))
	alice := core.Request{User: "alice", Plan: "free"}
	key := store.Key("user.free", "alice")
	bucket := []string{"-redis", srv.Addr, "-rules", limitsFile, "-rule", "user.free", "-key", "alice"}
	for _, tc := range []struct {
		name string
		env  []string
		flag []string
	}{
		{"environment", []string{"RATELIMIT_IDENTITY_SECRET=" + secret}, nil},
		{"file", nil, []string{"-secret-file", secretFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runEnv(t, tc.env, append(append([]string{"inspect"}, tc.flag...), bucket...)...)
			if code != 0 || !strings.Contains(out, "redis key: "+key+"\n") || !strings.Contains(out, "remaining: 7 of 10\n") {
				t.Fatalf("inspect: status %d, stdout %q, stderr %q; want the key %s, remaining 7 of 10", code, out, errOut, key)
			}
			code, out, errOut = runEnv(t, tc.env, append(append([]string{"reset"}, tc.flag...), bucket...)...)
			if code != 0 || !strings.HasPrefix(out, "reset "+key+": ") {
				t.Fatalf("reset: status %d, stdout %q, stderr %q; want the key %s reset", code, out, errOut, key)
			}
			d, err := limiter.Allow(context.Background(), alice)
			if err != nil || d.Remaining != 9 {
				t.Errorf("Allow after reset = remaining %d, %v; want 9", d.Remaining, err)
			}
			// Back to 3 taken, for the next case.
			for range 2 {
				limiter.Allow(context.Background(), alice)
			}
		})
	}
	code, _, errOut := runEnv(t, []string{"RATELIMIT_IDENTITY_SECRET=" + secret}, append([]string{"inspect", "-secret-file", secretFile}, bucket...)...)
	if code != 2 || !strings.Contains(errOut, "ratelimit: inspect: -secret-file and RATELIMIT_IDENTITY_SECRET both give the identity secret: give one\n") {
		t.Errorf("inspect with two secrets: status %d, stderr %q; want 2 and a usage error", code, errOut)
	}
	code, _, errOut = runEnv(t, []string{"RATELIMIT_IDENTITY_SECRET=short"}, append([]string{"inspect"}, bucket...)...)
	if code != 1 || !strings.Contains(errOut, "16 bytes") {
		t.Errorf("inspect with a short secret: status %d, stderr %q; want 1 and the secret's length", code, errOut)
	}
}
