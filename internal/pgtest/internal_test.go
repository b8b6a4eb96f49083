package pgtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Stop ends the sessions of connected clients at once (a fast shutdown),
// so a "database down" test does not wait for its own pool to disconnect.
func TestStopEndsSessions(t *testing.T) {
	t.Parallel()
	s := Start(t)
	cn, err := dial("tcp", s.Addr, Superuser, s.Database, time.Now().Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cn.close()
	start := time.Now()
	s.Stop()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop with an idle session took %v, want well under the 5s grace", d)
	}
	if _, err := cn.query("SELECT 1"); err == nil {
		t.Error("query on a session after Stop = nil error, want the session ended")
	}
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mkbin := func(dir string, names ...string) string {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	v9 := mkbin(filepath.Join(root, "lib", "9.6", "bin"), "initdb", "postgres")
	v15 := mkbin(filepath.Join(root, "lib", "15", "bin"), "initdb", "postgres")
	mkbin(filepath.Join(root, "lib", "17", "bin"), "initdb") // no server: skipped
	path := mkbin(filepath.Join(root, "path"), "initdb", "postgres")
	glob := filepath.Join(root, "lib", "*", "bin")
	none := filepath.Join(root, "none", "*", "bin")
	onPath := func(dir string) func(string) (string, error) {
		return func(name string) (string, error) {
			p := filepath.Join(dir, name)
			if _, err := os.Stat(p); err != nil {
				return "", err
			}
			return p, nil
		}
	}
	nothing := onPath(filepath.Join(root, "empty"))
	for _, tc := range []struct {
		name     string
		lookPath func(string) (string, error)
		glob     string
		want     string // directory of both binaries; "" for an error
	}{
		{"on PATH", onPath(path), glob, path},
		{"highest version off PATH", nothing, glob, v15},
		{"none", nothing, none, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findBinaries(tc.lookPath, tc.glob)
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "install the postgresql package") {
					t.Fatalf("findBinaries = %v, %v; want an error saying to install the postgresql package", got, err)
				}
				return
			}
			want := binaries{filepath.Join(tc.want, "initdb"), filepath.Join(tc.want, "postgres")}
			if err != nil || got != want {
				t.Fatalf("findBinaries = %+v, %v; want %+v", got, err, want)
			}
		})
	}
	_ = v9
}

func TestParseDataRow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []byte
		want []string
		bad  bool
	}{
		{"two columns, one NULL", []byte{0, 2, 0, 0, 0, 2, 'h', 'i', 0xff, 0xff, 0xff, 0xff}, []string{"hi", ""}, false},
		{"no columns", []byte{0, 0}, []string{}, false},
		{"truncated count", []byte{0}, nil, true},
		{"length past the end", []byte{0, 1, 0, 0, 0, 9, 'x'}, nil, true},
		{"missing column", []byte{0, 2, 0, 0, 0, 1, 'x'}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseDataRow(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("parseDataRow(%v) = %q, nil; want an error", tc.in, got)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Fatalf("parseDataRow(%v) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}
