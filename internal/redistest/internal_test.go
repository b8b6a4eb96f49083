package redistest

import (
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/internal/proctest"
)

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

// TestKillHoldsThePort: while a killed server is down, its port refuses
// connections and no one else can bind it; Restart gets it back.
func TestKillHoldsThePort(t *testing.T) {
	s := Standalone(t)
	s.Kill()
	proctest.CheckPortHeld(t, s.Addr)
	s.Restart(t)
	if _, err := s.Do("PING"); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}
