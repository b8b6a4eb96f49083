package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// numbered returns lines "prefix1" to "prefixN", each ending in a newline.
func numbered(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s%d\n", prefix, i)
	}
	return b.String()
}

func TestTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", ""},
		{"short", "a\nb\n", "a\nb"},
		{"no final newline", "a\nb", "a\nb"},
		{"exactly TailLines", numbered("l", 25), strings.TrimSuffix(numbered("l", 25), "\n")},
		{"longer", numbered("l", 30), strings.TrimSuffix(strings.TrimPrefix(numbered("l", 30), numbered("l", 5)), "\n")},
	} {
		if got := Tail(tc.text); got != tc.want {
			t.Errorf("Tail(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLogTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "server.log")
	old := "run 1\n"
	if err := os.WriteFile(path, []byte(old+"run 2 a\nrun 2 b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, "long.log")
	if err := os.WriteFile(long, []byte(numbered(strings.Repeat("x", 1000), 40)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		from       int64
		want       string
	}{
		{"one run", path, int64(len(old)), "run 2 a\nrun 2 b"},
		{"whole log", path, 0, "run 1\nrun 2 a\nrun 2 b"},
	} {
		if got := logTail(tc.path, tc.from); got != tc.want {
			t.Errorf("logTail(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
	// Of a long log only the last 8 KiB are read: 8 lines of 1,003 bytes
	// and the last 168 bytes of line 32.
	x := strings.Repeat("x", 1000)
	want := strings.Repeat("x", 165) + "32\n" + numbered(x, 40)[len(numbered(x, 32)):]
	if got := logTail(long, 0); got != strings.TrimSuffix(want, "\n") {
		t.Errorf("logTail(long log) = %d lines starting %.20q, want the last 8 KiB: %d lines", strings.Count(got, "\n")+1, got, strings.Count(want, "\n"))
	}
	if got := logTail(filepath.Join(dir, "missing.log"), 0); !strings.HasPrefix(got, "(no log: ") {
		t.Errorf("logTail(missing) = %q, want (no log: ...)", got)
	}
}

// Run calls every cleanup at once: each waits until all have begun.
func TestCleanups(t *testing.T) {
	t.Parallel()
	const n = 4
	var c Cleanups
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	var mu sync.Mutex
	ran := 0
	for range n {
		c.Add(func() {
			started.Done()
			select {
			case <-all:
			case <-time.After(5 * time.Second):
				t.Error("a cleanup waited 5s for the others: Run calls them one at a time")
			}
			mu.Lock()
			ran++
			mu.Unlock()
		})
	}
	c.Run()
	c.Run() // nothing new
	if ran != n {
		t.Fatalf("after Run twice: %d cleanups ran, want %d", ran, n)
	}
	c.Add(func() { ran++ })
	c.Run()
	if ran != n+1 {
		t.Fatalf("after Add and Run: %d cleanups ran, want %d", ran, n+1)
	}
}
