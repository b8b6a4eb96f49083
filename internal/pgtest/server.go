package pgtest

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/internal/proctest"
)

const (
	// Superuser is the role initdb creates and URL connects as. Every
	// loopback connection is trusted, so it has no password.
	Superuser = "postgres"
	// stopGrace is how long a server has to exit after the fast-shutdown
	// signal before it gets SIGKILL.
	stopGrace = 5 * time.Second
	// pollInterval is the pause between readiness probes.
	pollInterval = 20 * time.Millisecond
	// probeTimeout bounds one Exec or Query.
	probeTimeout = 10 * time.Second
	// installHint says how to get the binaries.
	installHint = "install the postgresql package (apt-get install postgresql on Debian/Ubuntu, brew install postgresql on macOS) or run make deps"
)

// Server is one PostgreSQL server on 127.0.0.1, with its own data
// directory. Its methods are safe for concurrent use.
type Server struct {
	// Addr is the address clients dial, "127.0.0.1:port". It does not
	// change when the server restarts.
	Addr string
	// Port is the TCP port of Addr.
	Port int
	// Database is the database Start created, which URL names.
	Database string

	bins     binaries
	acct     *account // the user the server runs as; nil: this process's
	dir      string   // holds data/, the Unix socket and postgres.log
	timeout  time.Duration
	settings []setting
	// svc runs the postmaster; nil until start made it.
	svc *proctest.Server
}

// Start runs initdb into a fresh temporary directory, starts postgres on a
// free loopback port, waits until it accepts connections and creates the
// database (see WithDatabase). The server is stopped and its directory
// removed when t and its subtests complete, whether or not the test failed.
// If the PostgreSQL binaries are missing, or the server does not start,
// Start fails the test with the reason and the end of the server's log;
// it never skips.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := start(opts, t.Logf, t.Cleanup)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// StartServer is [Start] for TestMain and other code without a testing.TB:
// it returns a function that stops the server and removes its directory,
// which the caller must call (a second call does nothing). On error
// everything started is already stopped and removed.
func StartServer(opts ...Option) (*Server, func(), error) {
	var stop func()
	s, err := start(opts, nil, func(f func()) { stop = f })
	if err != nil {
		if stop != nil {
			stop()
		}
		return nil, nil, err
	}
	return s, stop, nil
}

// start makes and starts a server, registering its final stop with
// register as soon as there is something to stop.
func start(opts []Option, logf func(string, ...any), register func(func())) (*Server, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	bins, err := findBinaries(exec.LookPath, defaultBinGlob)
	if err != nil {
		return nil, err
	}
	acct, err := unprivileged()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{Database: cfg.database, bins: bins, acct: acct, dir: dir, timeout: cfg.startTimeout, settings: cfg.settings}
	register(s.stop)
	// The server reports its data directory with symbolic links resolved
	// nowhere; resolve them here, so that the readiness probe's comparison
	// holds on systems where the temporary directory is a link (macOS).
	if s.dir, err = filepath.EvalSymlinks(dir); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := acct.give(s.dir); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.timeout)
	if err := s.initdb(deadline); err != nil {
		return nil, err
	}
	err = proctest.TryPorts(func() (int, error) { return proctest.FreePort() }, func(port int) error {
		s.Port, s.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		svc, err := proctest.NewServer("pgtest", port, s.logPath(), s.command, s.probe,
			proctest.WithStartTimeout(s.timeout), proctest.WithStopSignal(sigStop), proctest.WithStopGrace(stopGrace),
			proctest.WithPollInterval(pollInterval), proctest.WithLogf(logf))
		if err != nil {
			return err
		}
		s.svc = svc
		return svc.Start(deadline)
	})
	if err != nil {
		return nil, err
	}
	// The name was checked by newConfig: nothing to quote.
	if _, err := s.query("postgres", "CREATE DATABASE "+s.Database); err != nil {
		return nil, fmt.Errorf("pgtest: %s: CREATE DATABASE %s: %w", s.Addr, s.Database, err)
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "postgres.log") }

// initdb makes the data directory: trust authentication for every
// connection (only loopback ones are accepted), UTF8, the C locale, and no
// fsync, since the data is thrown away.
func (s *Server) initdb(deadline time.Time) error {
	var out bytes.Buffer
	cmd := exec.Command(s.bins.initdb, "-D", s.dataDir(), "-U", Superuser, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.Stdout, cmd.Stderr = &out, &out
	s.acct.setUser(cmd)
	if err := proctest.StartCmd(cmd); err != nil {
		return fmt.Errorf("pgtest: start %s: %w", s.bins.initdb, err)
	}
	timer := time.AfterFunc(time.Until(deadline), func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	if !timer.Stop() {
		return fmt.Errorf("pgtest: %s did not finish within %v; its output:\n%s", s.bins.initdb, s.timeout, proctest.Tail(out.String()))
	}
	if err != nil {
		return fmt.Errorf("pgtest: %s -D %s: %v; its output:\n%s", s.bins.initdb, s.dataDir(), err, proctest.Tail(out.String()))
	}
	return nil
}

// serverEnv is this process's environment without the PG variables, which
// would change what initdb and postgres do.
func serverEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
}

// command is the postgres command line, run as the server's user.
func (s *Server) command() *exec.Cmd {
	cmd := exec.Command(s.bins.postgres, s.args()...)
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	s.acct.setUser(cmd)
	return cmd
}

// args are the postgres arguments.
func (s *Server) args() []string {
	args := []string{
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.Port),
		"-k", s.dir,
		"-c", "listen_addresses=127.0.0.1",
		// Durability buys nothing for data thrown away at the end.
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
	}
	for _, st := range s.settings {
		args = append(args, "-c", st.name+"="+st.value)
	}
	return args
}

// URL returns a connection string for the database Start created, as the
// superuser, without TLS: postgres://postgres@127.0.0.1:port/test?sslmode=disable.
// pgx, pgxpool and lib/pq accept it. It does not change when the server
// restarts.
func (s *Server) URL() string { return s.urlFor(s.Database) }

func (s *Server) urlFor(database string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(Superuser),
		Host:     s.Addr,
		Path:     "/" + database,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// CreateDatabase creates another, empty database on the server and returns
// a connection string for it, as URL does for the first: tests that share
// one server keep their tables apart this way, at a fraction of the cost
// of a server each. name follows the rules of WithDatabase and must not
// exist yet.
func (s *Server) CreateDatabase(name string) (string, error) {
	if !identifier.MatchString(name) {
		return "", fmt.Errorf("pgtest: CreateDatabase: name must match %s, got %q", identifier, name)
	}
	if _, err := s.query("postgres", "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("pgtest: %s: CREATE DATABASE %s: %w", s.Addr, name, err)
	}
	return s.urlFor(name), nil
}

// Exec runs sql, one or more statements, in the server's database on a new
// connection, as the superuser, and returns the first error, a
// *[ServerError] when PostgreSQL refused a statement. Use it to change the
// database behind a client's back. It gives up after 10s.
func (s *Server) Exec(sql string) error {
	_, err := s.query(s.Database, sql)
	return err
}

// Query is Exec that returns the rows the statements produced, every value
// as PostgreSQL's text form and a NULL as "".
func (s *Server) Query(sql string) ([][]string, error) {
	return s.query(s.Database, sql)
}

func (s *Server) query(database, sql string) ([][]string, error) {
	cn, err := dial("tcp", s.Addr, Superuser, database, time.Now().Add(probeTimeout))
	if err != nil {
		return nil, err
	}
	defer cn.close()
	return cn.query(sql)
}

// Pid returns the process id of the running postmaster, or 0 when the
// server is not running (after Stop, or after the cleanup).
func (s *Server) Pid() int { return s.svc.Pid() }

// Stop shuts the server down with PostgreSQL's fast shutdown (SIGINT):
// every session is ended, so clients see their connections closed and new
// ones refused. It waits until the server has exited, sending SIGKILL after
// 5s. The data stays, for Restart. While the server is down its port stays
// bound, without listening, so that a server of another test binary cannot
// take it and answer in its place; this is best effort. Stop does nothing
// if the server is not running.
func (s *Server) Stop() { s.svc.Stop() }

// Restart starts the server again on the same port and data directory,
// stopping it first if it is running, and waits until it accepts
// connections: what was committed before is there again. Restart fails t
// if the server does not come back within the start timeout.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.svc.Restart(true); err != nil {
		t.Fatal(err)
	}
}

// probe is the readiness probe. It connects over the Unix socket in the
// server's directory, which only this server has, and asks for its data
// directory all the same. Not over TCP: while the server starts up it
// refuses sessions and closes them itself, which would leave TIME_WAIT
// connections on its port and keep Stop from holding it. postgres exits if
// it cannot bind its TCP port, so a server that answers owns it.
func (s *Server) probe(_ int, deadline time.Time) error {
	if d := time.Now().Add(time.Second); d.Before(deadline) {
		deadline = d
	}
	sock := filepath.Join(s.dir, ".s.PGSQL."+strconv.Itoa(s.Port))
	cn, err := dial("unix", sock, Superuser, "postgres", deadline)
	if err != nil {
		return err
	}
	defer cn.close()
	rows, err := cn.query("SHOW data_directory")
	if err != nil {
		return err
	}
	if len(rows) != 1 || len(rows[0]) != 1 || rows[0][0] != s.dataDir() {
		return fmt.Errorf("a server with data directory %q answered, want %q", rows, s.dataDir())
	}
	return nil
}

// stop ends the server for good and removes its directory. It is
// idempotent.
func (s *Server) stop() {
	if s.svc != nil {
		s.svc.Close()
	}
	_ = os.RemoveAll(s.dir)
}
