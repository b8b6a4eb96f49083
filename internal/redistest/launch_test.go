package redistest

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A port taken between its choice and redis-server's bind: the harness
// notices (even though the thief accepts connections) and retries on another.
func TestLaunchRetriesStolenPort(t *testing.T) {
	t.Parallel()
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := &cleanups{logf: t.Logf}
	t.Cleanup(cl.run)
	var stolen []int
	s, err := launch(cfg, cl, false, func(b binary, port int, dir string) ([]string, error) {
		if len(stolen) < 2 {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			stolen = append(stolen, port)
		}
		return dataArgs(cfg, b, port, dir), nil
	})
	if err != nil {
		t.Fatalf("launch with two stolen ports: %v", err)
	}
	if len(stolen) != 2 || s.Port == stolen[0] || s.Port == stolen[1] {
		t.Fatalf("server on port %d, stolen %v: want a third port", s.Port, stolen)
	}
	if v, err := s.Do("PING"); v != "PONG" || err != nil {
		t.Fatalf("Do(PING) = %v, %v", v, err)
	}
}

// Restart waits, within the start timeout, for its port to be free again.
func TestRestartWaitsForItsPort(t *testing.T) {
	t.Parallel()
	s := Standalone(t)
	s.Kill()
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, func() { l.Close() })
	s.Restart(t)
	if v, err := s.Do("PING"); v != "PONG" || err != nil {
		t.Fatalf("Do(PING) after Restart = %v, %v", v, err)
	}
}

func TestParseCommandStats(t *testing.T) {
	t.Parallel()
	text := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_script|load:calls=1,usec=9,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(text)
	if err != nil || len(got) != 2 || got["evalsha"] != 3 || got["script|load"] != 1 {
		t.Fatalf("parseCommandStats = %v, %v; want evalsha 3, script|load 1", got, err)
	}
	if _, err := parseCommandStats("cmdstat_get:calls=x\r\n"); err == nil {
		t.Fatal("parseCommandStats(calls=x) = nil error")
	}
}

// Right after a master without replicas dies, before its peers notice, the
// cluster is not healthy: its slots have no running owner.
func TestCheckSeesKilledMaster(t *testing.T) {
	t.Parallel()
	c := Cluster(t)
	if err := c.check(false); err != nil {
		t.Fatalf("check of a fresh cluster = %v, want nil", err)
	}
	c.Masters[2].Kill()
	if err := c.check(false); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("check right after Kill = %v, want slots owned by a node that is not running", err)
	}
}
