package redistest

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// session is one client connection, for commands that depend on what came
// before them on it (AUTH).
type session struct {
	t    testing.TB
	addr string
	conn net.Conn
	r    *bufio.Reader
}

// dial opens a session to addr, over TLS with a non-nil tlsConfig.
func dial(t testing.TB, addr string, tlsConfig *tls.Config) *session {
	t.Helper()
	var conn net.Conn
	var err error
	if tlsConfig == nil {
		conn, err = net.DialTimeout("tcp", addr, doTimeout)
	} else {
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: doTimeout}, "tcp", addr, tlsConfig)
	}
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(doTimeout))
	return &session{t: t, addr: addr, conn: conn, r: bufio.NewReader(conn)}
}

// do sends one command and returns its reply, error replies as a
// ReplyError value; a broken connection fails the test.
func (s *session) do(args ...string) any {
	s.t.Helper()
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := io.WriteString(s.conn, b.String()); err != nil {
		s.t.Fatalf("%s: %q: %v", s.addr, args, err)
	}
	v, err := readReply(s.r)
	if err != nil {
		s.t.Fatalf("%s: %q: %v", s.addr, args, err)
	}
	return v
}

// want sends one command and fails the test unless the reply is want.
func (s *session) want(want any, args ...string) {
	s.t.Helper()
	if got := s.do(args...); !reflect.DeepEqual(got, want) {
		s.t.Fatalf("%s: %q = %#v, want %#v", s.addr, args, got, want)
	}
}

// wantErr sends one command and fails the test unless the reply is an
// error starting with prefix.
func (s *session) wantErr(prefix string, args ...string) {
	s.t.Helper()
	got := s.do(args...)
	if e, ok := got.(ReplyError); !ok || !strings.HasPrefix(string(e), prefix) {
		s.t.Fatalf("%s: %q = %#v, want an error starting with %q", s.addr, args, got, prefix)
	}
}

// refusesPlaintext fails the test if addr answers PING over plain TCP.
func refusesPlaintext(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, doTimeout)
	if err != nil {
		t.Fatalf("%s: %v; want the TLS port to accept the connection, then close it", addr, err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(doTimeout))
	if _, err := io.WriteString(conn, "*1\r\n$4\r\nPING\r\n"); err != nil {
		return // closed already
	}
	if line, err := bufio.NewReader(conn).ReadString('\n'); err == nil || strings.Contains(line, "PONG") {
		t.Fatalf("%s: PING over plain TCP = %q, %v; want the connection closed", addr, line, err)
	}
}

// checkTLS fails the test unless s answers PING over TLS with the
// configuration it hands out, and only then: not over plain TCP, and not
// to a client that does not trust the test CA.
func checkTLS(t *testing.T, s *Server) {
	t.Helper()
	cfg := s.TLSConfig()
	if cfg == nil || cfg.RootCAs == nil {
		t.Fatalf("%s: TLSConfig() = %v, want a configuration with the test CA", s.Addr, cfg)
	}
	if v, err := s.Do("PING"); v != "PONG" || err != nil {
		t.Fatalf("%s: Do(PING) = %v, %v; want PONG over TLS", s.Addr, v, err)
	}
	conn := dial(t, s.Addr, cfg)
	conn.want("PONG", "PING")
	if state := conn.conn.(*tls.Conn).ConnectionState(); !state.HandshakeComplete || len(state.PeerCertificates) == 0 {
		t.Fatalf("%s: TLS state %+v, want a completed handshake with the server's certificate", s.Addr, state)
	}
	refusesPlaintext(t, s.Addr)
	_, err := tls.DialWithDialer(&net.Dialer{Timeout: doTimeout}, "tcp", s.Addr, &tls.Config{RootCAs: x509.NewCertPool()})
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("%s: TLS without the test CA: %v, want an unknown authority error", s.Addr, err)
	}
}

func TestTLSStandalone(t *testing.T) {
	t.Parallel()
	s := Standalone(t, WithTLS())
	checkTLS(t, s)
	if a, b := s.TLSConfig(), s.TLSConfig(); a == b {
		t.Fatal("TLSConfig returned the same *tls.Config twice, want a new one each time")
	}
	// The harness's own checks work over TLS: Restart waits for the server.
	s.Restart(t)
	checkTLS(t, s)
	if plain := Standalone(t); plain.TLSConfig() != nil {
		t.Fatalf("TLSConfig() without WithTLS = %v, want nil", plain.TLSConfig())
	}
}

// TestTLSCluster: the cluster forms, replicates and answers over TLS only,
// and announces its TLS ports.
func TestTLSCluster(t *testing.T) {
	t.Parallel()
	c := Cluster(t, WithTLS(), WithReplicas(1))
	if c.TLSConfig() == nil {
		t.Fatal("ClusterServer.TLSConfig() = nil, want the test CA")
	}
	for _, n := range c.Nodes() {
		checkTLS(t, n)
		v, err := n.Do("CONFIG", "GET", "tls-cluster")
		if want := []any{"tls-cluster", "yes"}; err != nil || !reflect.DeepEqual(v, want) {
			t.Fatalf("%s: CONFIG GET tls-cluster = %v, %v; want %v", n.Addr, v, err, want)
		}
	}
	for i, m := range c.Masters {
		if o := c.SlotOwner(i * SlotCount / clusterMasters); o != m {
			t.Fatalf("SlotOwner(%d) = %v, want %s", i*SlotCount/clusterMasters, o, m.Addr)
		}
	}
	// CLUSTER SLOTS, which clients read, names the TLS ports.
	conn := dial(t, c.Masters[0].Addr, c.TLSConfig())
	slots, _ := conn.do("CLUSTER", "SLOTS").([]any)
	if len(slots) != clusterMasters {
		t.Fatalf("CLUSTER SLOTS = %v, want %d ranges", slots, clusterMasters)
	}
	for _, r := range slots {
		r, _ := r.([]any)
		for _, n := range r[2:] {
			n, _ := n.([]any)
			if c.node(net.JoinHostPort(n[0].(string), strconv.FormatInt(n[1].(int64), 10))) == nil {
				t.Fatalf("CLUSTER SLOTS names node %v, which is not one of the cluster's TLS addresses", n)
			}
		}
	}
}

func TestACLUser(t *testing.T) {
	t.Parallel()
	s := Standalone(t, WithACLUser("app", "s3cret pass", "~app:*", "+get", "+set"), WithACLUser("reader", "", "~*", "+get"))
	check := func(t *testing.T) {
		app := dial(t, s.Addr, nil)
		app.want("OK", "AUTH", "app", "s3cret pass")
		app.want("OK", "SET", "app:k", "v")
		app.want("v", "GET", "app:k")
		app.wantErr("NOPERM", "SET", "other:k", "v")     // a key outside the pattern
		app.wantErr("NOPERM", "DEL", "app:k")            // a command not allowed
		app.wantErr("NOPERM", "FLUSHALL")                // not even close
		app.wantErr("NOPERM", "SUBSCRIBE", "app:events") // no channels: the user was reset
		dial(t, s.Addr, nil).wantErr("WRONGPASS", "AUTH", "app", "wrong")

		reader := dial(t, s.Addr, nil)
		reader.want("OK", "AUTH", "reader", "anything") // nopass
		reader.want("v", "GET", "app:k")
		reader.wantErr("NOPERM", "SET", "app:k", "w")

		// The harness stays the unrestricted default user.
		if v, err := s.Do("SET", "other:k", "v"); v != "OK" || err != nil {
			t.Fatalf("Do(SET other:k) = %v, %v; want OK as the default user", v, err)
		}
		if v, err := s.Do("ACL", "WHOAMI"); v != "default" || err != nil {
			t.Fatalf("Do(ACL WHOAMI) = %v, %v; want default", v, err)
		}
	}
	t.Run("started", check)
	s.Restart(t)
	t.Run("restarted", check)
}

// TestACLUserTLSCluster: every node of a TLS cluster has the user.
func TestACLUserTLSCluster(t *testing.T) {
	t.Parallel()
	c := Cluster(t, WithTLS(), WithACLUser("app", "pw", "~app:*", "+get", "+set", "+cluster|slots"))
	for _, n := range c.Nodes() {
		app := dial(t, n.Addr, c.TLSConfig())
		app.want("OK", "AUTH", "app", "pw")
		if slots, ok := app.do("CLUSTER", "SLOTS").([]any); !ok || len(slots) != clusterMasters {
			t.Fatalf("%s: CLUSTER SLOTS as app = %v, want %d ranges", n.Addr, slots, clusterMasters)
		}
		app.wantErr("NOPERM", "CLUSTER", "NODES")
		app.wantErr("NOPERM", "GET", "other:k")
		key := "app:k"
		if owner := c.SlotOwner(KeySlot(key)); owner == n {
			app.want("OK", "SET", key, "v")
		} else {
			app.wantErr("MOVED", "SET", key, "v")
		}
	}
}

func TestACLUserOptionErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"empty name", []Option{WithACLUser("", "pw", "+get")}, "WithACLUser: name must not be empty"},
		{"default", []Option{WithACLUser("default", "pw", "+get")}, `name must not be "default"`},
		{"space in name", []Option{WithACLUser("a b", "pw")}, `WithACLUser("a b"): name must not contain spaces`},
		{"twice", []Option{WithACLUser("a", "x"), WithACLUser("a", "y")}, `WithACLUser("a"): user given twice`},
		{"empty rule", []Option{WithACLUser("a", "pw", "")}, `WithACLUser("a"): rule "" must be one non-empty word`},
		{"directive as rule", []Option{WithACLUser("a", "pw", "--port")}, `rule "--port" must be one non-empty word`},
		{"two rules in one", []Option{WithACLUser("a", "pw", "+get +set")}, `rule "+get +set" must be one non-empty word`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := newConfig(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("newConfig error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	// A rule that Redis refuses: the server does not start and says why.
	_, _, err := StartStandalone(WithACLUser("a", "pw", "+nosuchcommand"))
	if err == nil || !strings.Contains(err.Error(), "exited during startup") || !strings.Contains(err.Error(), "nosuchcommand") {
		t.Fatalf("StartStandalone(rule +nosuchcommand) error = %v, want the exit and the log naming the rule", err)
	}
}

func TestTLSSentinelRefused(t *testing.T) {
	t.Parallel()
	if _, _, err := StartSentinel(WithTLS()); err == nil || !strings.Contains(err.Error(), "WithTLS: not supported by Sentinel") {
		t.Fatalf("StartSentinel(WithTLS()) error = %v, want WithTLS not supported", err)
	}
}
