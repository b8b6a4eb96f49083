package pgtest_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/internal/pgtest"
	"github.com/bucketry/ratelimit/internal/proctest"
)

// query runs sql on s and fails t unless it returns want.
func query(t *testing.T, s *pgtest.Server, sql string, want [][]string) {
	t.Helper()
	got, err := s.Query(sql)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: Query(%q) = %q, %v; want %q, nil", s.Addr, sql, got, err, want)
	}
}

func TestStart(t *testing.T) {
	t.Parallel()
	var pid int
	var dataDir string
	t.Run("server", func(t *testing.T) {
		s := pgtest.Start(t)
		if want := "127.0.0.1:" + strconv.Itoa(s.Port); s.Addr != want {
			t.Fatalf("Addr = %q, want %q", s.Addr, want)
		}
		if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", s.Port); s.URL() != want {
			t.Fatalf("URL() = %q, want %q", s.URL(), want)
		}
		query(t, s, "SELECT current_database(), current_user, current_setting('listen_addresses'), current_setting('fsync')",
			[][]string{{"test", "postgres", "127.0.0.1", "off"}})
		query(t, s, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user", [][]string{{"t"}})
		rows, err := s.Query("SHOW data_directory")
		if err != nil {
			t.Fatal(err)
		}
		dataDir = rows[0][0]

		pid = s.Pid()
		if pid == 0 || !proctest.Alive(pid) {
			t.Fatalf("Pid() = %d, want a running process", pid)
		}
		if os.Geteuid() == 0 {
			if uid := proctest.UIDOf(t, pid); uid == 0 {
				t.Fatalf("postgres runs as uid 0; want an unprivileged user")
			}
		}

		if err := s.Exec("CREATE TABLE kv (k text PRIMARY KEY, v int); INSERT INTO kv VALUES ('a', 1), ('b', NULL)"); err != nil {
			t.Fatal(err)
		}
		query(t, s, "SELECT k, v FROM kv ORDER BY k", [][]string{{"a", "1"}, {"b", ""}})
		err = s.Exec("SELECT * FROM missing")
		var se *pgtest.ServerError
		if !errors.As(err, &se) || se.Code != "42P01" {
			t.Fatalf("Exec(SELECT * FROM missing) = %v, want a *ServerError with SQLSTATE 42P01", err)
		}

		s.Stop()
		proctest.WaitGone(t, "after Stop", pid)
		if s.Pid() != 0 {
			t.Fatalf("Pid() after Stop = %d, want 0", s.Pid())
		}
		// While down, the port refuses connections and no one else can bind
		// it: it stays the server's, for Restart.
		proctest.CheckPortHeld(t, s.Addr)
		s.Stop() // a second Stop does nothing

		addr := s.Addr
		s.Restart(t)
		if s.Addr != addr || s.Pid() == pid || s.Pid() == 0 {
			t.Fatalf("after Restart: Addr %q Pid %d; want Addr %q and a new pid", s.Addr, s.Pid(), addr)
		}
		query(t, s, "SELECT k FROM kv ORDER BY k", [][]string{{"a"}, {"b"}}) // the data persists
		pid = s.Pid()
		s.Restart(t) // restarting a running server stops it first
		proctest.WaitGone(t, "after Restart of a running server", pid)
		query(t, s, "SELECT count(*) FROM kv", [][]string{{"2"}})
		pid = s.Pid()
	})
	// The subtest's cleanup stopped the server and removed its files.
	proctest.WaitGone(t, "after the cleanup", pid)
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data directory %s after the cleanup: %v, want it removed", dataDir, err)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	s := pgtest.Start(t, pgtest.WithDatabase("rules_db"), pgtest.WithSetting("max_connections", "17"), pgtest.WithStartTimeout(time.Minute))
	query(t, s, "SELECT current_database(), current_setting('max_connections')", [][]string{{"rules_db", "17"}})
	if !strings.HasSuffix(s.URL(), "/rules_db?sslmode=disable") {
		t.Errorf("URL() = %q, want it to name rules_db", s.URL())
	}
	u, err := s.CreateDatabase("other")
	if want := strings.Replace(s.URL(), "/rules_db?", "/other?", 1); err != nil || u != want {
		t.Fatalf("CreateDatabase(other) = %q, %v; want %q, nil", u, err, want)
	}
	query(t, s, "SELECT count(*) FROM pg_database WHERE datname = 'other'", [][]string{{"1"}})
	if _, err := s.CreateDatabase("other"); err == nil || !strings.Contains(err.Error(), "42P04") {
		t.Errorf("CreateDatabase(other) again = %v, want SQLSTATE 42P04 (duplicate database)", err)
	}
	if _, err := s.CreateDatabase("Other-DB"); err == nil || !strings.Contains(err.Error(), "pgtest: CreateDatabase: name must match") {
		t.Errorf("CreateDatabase(Other-DB) = %v, want a name error", err)
	}
}

// Invalid options fail StartServer before anything starts; an invalid
// setting value fails the server, with PostgreSQL's reason from its log.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []pgtest.Option
		want []string
	}{
		{"nil option", []pgtest.Option{nil}, []string{"pgtest: option 0 is nil"}},
		{"database with a capital", []pgtest.Option{pgtest.WithDatabase("Rules")}, []string{"pgtest: WithDatabase: name must match"}},
		{"database empty", []pgtest.Option{pgtest.WithDatabase("")}, []string{"pgtest: WithDatabase: name must match"}},
		{"database of initdb", []pgtest.Option{pgtest.WithDatabase("postgres")}, []string{`pgtest: WithDatabase: "postgres" exists already`}},
		{"zero timeout", []pgtest.Option{pgtest.WithStartTimeout(0)}, []string{"pgtest: WithStartTimeout: timeout must be > 0, got 0s"}},
		{"setting name", []pgtest.Option{pgtest.WithSetting("max connections", "1")}, []string{`pgtest: WithSetting("max connections")`}},
		{"setting value", []pgtest.Option{pgtest.WithSetting("max_connections", "not-a-number")}, []string{"pgtest: postgres for 127.0.0.1:", "exited during startup", `"max_connections"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, stop, err := pgtest.StartServer(tc.opts...)
			if err == nil {
				stop()
				t.Fatalf("StartServer = %v, nil; want an error containing %q", s, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("StartServer error = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestStartServer(t *testing.T) {
	t.Parallel()
	s, stop, err := pgtest.StartServer()
	if err != nil {
		t.Fatal(err)
	}
	query(t, s, "SELECT 1", [][]string{{"1"}})
	pid := s.Pid()
	stop()
	stop() // a second call does nothing
	proctest.WaitGone(t, "after stop", pid)
}
