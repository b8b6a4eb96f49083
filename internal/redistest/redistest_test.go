package redistest_test

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/internal/proctest"
	"github.com/bucketry/ratelimit/internal/redistest"
)

// do sends a command and fails the test unless the reply is want.
func do(t *testing.T, s *redistest.Server, want any, args ...string) {
	t.Helper()
	got, err := s.Do(args...)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: Do(%q) = %#v, %v; want %#v, nil", s.Addr, args, got, err, want)
	}
}

// info returns one field of INFO section on s.
func info(t *testing.T, s *redistest.Server, section, field string) string {
	t.Helper()
	v, err := s.Do("INFO", section)
	text, ok := v.(string)
	if err != nil || !ok {
		t.Fatalf("%s: INFO %s = %#v, %v", s.Addr, section, v, err)
	}
	for line := range strings.SplitSeq(text, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return v
		}
	}
	return ""
}

func pidsOf(t *testing.T, servers ...*redistest.Server) []int {
	t.Helper()
	var pids []int
	for _, s := range servers {
		pid := s.Pid()
		if pid == 0 || !proctest.Alive(pid) {
			t.Fatalf("%s: Pid() = %d, want a running process", s.Addr, pid)
		}
		pids = append(pids, pid)
	}
	return pids
}

func TestStandalone(t *testing.T) {
	t.Parallel()
	var pids []int
	t.Run("server", func(t *testing.T) {
		s := redistest.Standalone(t)
		if want := "127.0.0.1:" + strconv.Itoa(s.Port); s.Addr != want {
			t.Fatalf("Addr = %q, want %q", s.Addr, want)
		}
		do(t, s, "PONG", "PING")
		do(t, s, "OK", "SET", "k", "v")
		do(t, s, "v", "GET", "k")
		do(t, s, nil, "GET", "missing")
		do(t, s, int64(1), "DBSIZE")
		do(t, s, []any{"v", nil}, "MGET", "k", "missing")
		_, err := s.Do("INCR", "k")
		var re redistest.ReplyError
		if !errors.As(err, &re) || !strings.HasPrefix(string(re), "ERR value is not an integer") {
			t.Fatalf("Do(INCR k) error = %v, want ReplyError ERR value is not an integer", err)
		}
		do(t, s, "OK", "CONFIG", "RESETSTAT")
		do(t, s, "v", "GET", "k")
		if calls := s.CommandCalls(t); calls["get"] != 1 || calls["set"] != 0 {
			t.Errorf("CommandCalls after RESETSTAT and one GET = %v, want get 1 and no set", calls)
		}
		if got := info(t, s, "persistence", "aof_enabled"); got != "0" {
			t.Errorf("aof_enabled = %q, want 0", got)
		}

		first := s.Pid()
		s.Kill()
		if proctest.Alive(first) || s.Pid() != 0 {
			t.Fatalf("after Kill: pid %d alive = %v, Pid() = %d; want dead and 0", first, proctest.Alive(first), s.Pid())
		}
		if _, err := s.Do("PING"); err == nil {
			t.Fatal("Do(PING) after Kill = nil error, want connection refused")
		}
		s.Kill() // a second Kill does nothing

		addr := s.Addr
		s.Restart(t)
		if s.Addr != addr || s.Pid() == first || s.Pid() == 0 {
			t.Fatalf("after Restart: Addr %q Pid %d; want Addr %q and a new pid", s.Addr, s.Pid(), addr)
		}
		do(t, s, "PONG", "PING")
		do(t, s, nil, "GET", "k") // nothing is persisted
		s.Restart(t)              // restarting a running server kills it first
		do(t, s, "PONG", "PING")

		pids = pidsOf(t, s)
	})
	proctest.WaitGone(t, "after the cleanup of Standalone", pids...)
}

func TestPause(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t)
	conn, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)

	s.Pause()
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if line, err := r.ReadString('\n'); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from a paused server = %q, %v; want a timeout", line, err)
	}
	s.Resume()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); line != "+PONG\r\n" || err != nil {
		t.Fatalf("read after Resume = %q, %v; want +PONG", line, err)
	}
	s.Pause() // the cleanup must stop a paused server too
}

func TestOptions(t *testing.T) {
	t.Parallel()
	s := redistest.Standalone(t, redistest.WithArgs("--maxmemory", "12345678"), redistest.WithStartTimeout(10*time.Second))
	do(t, s, []any{"maxmemory", "12345678"}, "CONFIG", "GET", "maxmemory")

	for _, tc := range []struct {
		name string
		opt  redistest.Option
		want string
	}{
		{"negative replicas", redistest.WithReplicas(-1), "WithReplicas: count must be >= 0, got -1"},
		{"zero timeout", redistest.WithStartTimeout(0), "WithStartTimeout: timeout must be > 0, got 0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stop, err := redistest.StartCluster(tc.opt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				if stop != nil {
					stop()
				}
				t.Fatalf("StartCluster(%s) error = %v, want one containing %q", tc.name, err, tc.want)
			}
		})
	}
}

func TestStartupFailureShowsLog(t *testing.T) {
	t.Parallel()
	_, _, err := redistest.StartStandalone(redistest.WithArgs("--no-such-directive", "x"))
	if err == nil || !strings.Contains(err.Error(), "exited during startup") || !strings.Contains(err.Error(), "no-such-directive") {
		t.Fatalf("StartStandalone(bad argument) error = %v, want the exit and the log naming the directive", err)
	}
}

// Not parallel: it changes PATH.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, _, err := redistest.StartStandalone()
	want := "redis-server not found: install it with `apt-get install redis-server` (Debian/Ubuntu) or run `make deps`"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("StartStandalone without redis-server: error = %v, want %q", err, want)
	}
}

// The Start functions, for TestMain: their stop function stops every
// process they started (a second call does nothing).
func TestStartFunctions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func() ([]*redistest.Server, func(), error)
	}{
		{"StartStandalone", func() ([]*redistest.Server, func(), error) {
			s, stop, err := redistest.StartStandalone()
			if err != nil {
				return nil, nil, err
			}
			return []*redistest.Server{s}, stop, nil
		}},
		{"StartCluster", func() ([]*redistest.Server, func(), error) {
			c, stop, err := redistest.StartCluster()
			if err != nil {
				return nil, nil, err
			}
			return c.Nodes(), stop, nil
		}},
		{"StartSentinel", func() ([]*redistest.Server, func(), error) {
			s, stop, err := redistest.StartSentinel()
			if err != nil {
				return nil, nil, err
			}
			return []*redistest.Server{s.Master, s.Replica, s.Sentinel}, stop, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			servers, stop, err := tc.start()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop) // if the test fails before its own calls
			for _, s := range servers {
				do(t, s, "PONG", "PING")
			}
			pids := pidsOf(t, servers...)
			stop()
			stop()
			proctest.WaitGone(t, "after stop", pids...)
		})
	}
}

func TestKeySlot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"123456789", 0x31C3 % 16384}, // the check value of CRC-16/XMODEM
		{"", 0},
		{"{user}a", redistest.KeySlot("user")},
		{"{user}b", redistest.KeySlot("user")},
		{"a{}b", redistest.KeySlot("a{}b") /* whole key; checked against Redis below */},
		{"foo{bar}{zap}", redistest.KeySlot("bar")},
		{"foo{{bar}}zap", redistest.KeySlot("{bar")},
	} {
		if got := redistest.KeySlot(tc.key); got != tc.want {
			t.Errorf("KeySlot(%q) = %d, want %d", tc.key, got, tc.want)
		}
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	var pids []int
	t.Run("cluster", func(t *testing.T) {
		c := redistest.Cluster(t)
		nodes := c.Nodes()
		if len(nodes) != 3 || len(c.Masters) != 3 || len(c.Replicas) != 0 || len(c.Addrs()) != 3 {
			t.Fatalf("Nodes %d, Masters %d, Replicas %d, Addrs %d; want 3, 3, 0, 3",
				len(nodes), len(c.Masters), len(c.Replicas), len(c.Addrs()))
		}
		for _, n := range nodes {
			for field, want := range map[string]string{
				"cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_slots_ok": "16384", "cluster_known_nodes": "3",
			} {
				v, err := n.Do("CLUSTER", "INFO")
				text, _ := v.(string)
				if err != nil || !strings.Contains(text, field+":"+want+"\r\n") {
					t.Errorf("%s: CLUSTER INFO has no %s:%s: %q, %v", n.Addr, field, want, text, err)
				}
			}
			// CLUSTER SLOTS: every slot exactly once, owned by the node SlotOwner names.
			v, err := n.Do("CLUSTER", "SLOTS")
			ranges, ok := v.([]any)
			if err != nil || !ok {
				t.Fatalf("%s: CLUSTER SLOTS = %#v, %v", n.Addr, v, err)
			}
			covered := 0
			for _, r := range ranges {
				r, _ := r.([]any)
				lo, _ := r[0].(int64)
				hi, _ := r[1].(int64)
				m, _ := r[2].([]any)
				addr := fmt.Sprintf("%v:%v", m[0], m[1])
				covered += int(hi-lo) + 1
				for _, slot := range []int{int(lo), int(hi)} {
					if o := c.SlotOwner(slot); o == nil || o.Addr != addr {
						t.Errorf("%s: CLUSTER SLOTS gives slot %d to %s, SlotOwner(%d) = %v", n.Addr, slot, addr, slot, o)
					}
				}
			}
			if covered != 16384 {
				t.Errorf("%s: CLUSTER SLOTS covers %d slots, want 16384", n.Addr, covered)
			}
		}

		keys := []string{"{user}a", "{user}b", "a{}b", "{}{x}", "rl:{tenant:7}:user:42"}
		for i := range 30 {
			keys = append(keys, "key:"+strconv.Itoa(i))
		}
		for _, key := range keys {
			slot := redistest.KeySlot(key)
			owner := c.SlotOwner(slot)
			if owner == nil {
				t.Fatalf("SlotOwner(%d) = nil", slot)
			}
			do(t, owner, "OK", "SET", key, "v")
			moved := fmt.Sprintf("MOVED %d %s", slot, owner.Addr)
			for _, n := range nodes {
				if n == owner {
					continue
				}
				if _, err := n.Do("SET", key, "v"); err == nil || err.Error() != moved {
					t.Errorf("%s: SET %q error = %v, want %q", n.Addr, key, err, moved)
				}
			}
		}

		// KeySlot agrees with CLUSTER KEYSLOT, hash tags included.
		keys = append(keys, "", "{", "}", "{}", "}{", "{a", "a}", "}a{b}", "{{}}", "{}a", "a{b", "x{y}z",
			"foo{bar}{zap}", "foo{{bar}}zap", "{a}{b}", "{ }", "\x00{\xff}", "ключ{значение}", "123456789")
		rng := rand.New(rand.NewPCG(1, 2))
		for range 300 {
			b := make([]byte, rng.IntN(24))
			for i := range b {
				b[i] = "ab{}x\x00\xff"[rng.IntN(7)]
			}
			keys = append(keys, string(b))
		}
		for _, key := range keys {
			v, err := nodes[0].Do("CLUSTER", "KEYSLOT", key)
			if want, ok := v.(int64); err != nil || !ok || redistest.KeySlot(key) != int(want) {
				t.Errorf("KeySlot(%q) = %d, CLUSTER KEYSLOT = %v, %v", key, redistest.KeySlot(key), v, err)
			}
		}

		// A master without replicas that is killed takes the cluster down
		// until it comes back.
		victim := c.Masters[1]
		slot := redistest.KeySlot("{user}a")
		do(t, c.SlotOwner(slot), "OK", "SET", "{user}a", "before")
		victim.Kill()
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, _ := c.Masters[0].Do("CLUSTER", "INFO")
			if s, _ := v.(string); strings.Contains(s, "cluster_state:fail") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("cluster_state never became fail after a master was killed")
			}
			time.Sleep(50 * time.Millisecond)
		}
		victim.Restart(t)
		c.WaitHealthy(t)
		if o := c.SlotOwner(6000); o != victim {
			t.Fatalf("after Restart: SlotOwner(6000) = %v, want the restarted %s", o, victim.Addr)
		}
		for i := 0; ; i++ {
			if key := "k" + strconv.Itoa(i); redistest.KeySlot(key) >= 5461 && redistest.KeySlot(key) < 10922 {
				do(t, victim, "OK", "SET", key, "v") // it serves its slots again
				break
			}
		}
		pids = pidsOf(t, nodes...)
	})
	proctest.WaitGone(t, "after the cleanup of Cluster", pids...)
}

func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	c := redistest.Cluster(t, redistest.WithReplicas(1))
	if len(c.Nodes()) != 6 || len(c.Replicas) != 3 {
		t.Fatalf("Nodes %d, Replicas %d; want 6, 3", len(c.Nodes()), len(c.Replicas))
	}
	for j, r := range c.Replicas {
		m := c.Masters[j%3]
		if role, port, link := info(t, r, "replication", "role"), info(t, r, "replication", "master_port"),
			info(t, r, "replication", "master_link_status"); role != "slave" || port != strconv.Itoa(m.Port) || link != "up" {
			t.Errorf("replica %s: role %s, master_port %s, link %s; want slave of %d, up", r.Addr, role, port, link, m.Port)
		}
	}

	// Failover: the replica takes over the slots of its killed master, which
	// comes back as a replica.
	old, heir := c.Masters[0], c.Replicas[0]
	old.Kill()
	c.WaitHealthy(t)
	if o := c.SlotOwner(0); o != heir {
		t.Fatalf("after failover: SlotOwner(0) = %v, want %s", o, heir.Addr)
	}
	old.Restart(t)
	c.WaitHealthy(t)
	if role := info(t, old, "replication", "role"); role != "slave" {
		t.Errorf("restarted old master: role %s, want slave", role)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	var pids []int
	t.Run("sentinel", func(t *testing.T) {
		s := redistest.Sentinel(t)
		if s.MasterName != "mymaster" || s.SentinelAddr != s.Sentinel.Addr {
			t.Fatalf("MasterName %q, SentinelAddr %q; want mymaster, %q", s.MasterName, s.SentinelAddr, s.Sentinel.Addr)
		}
		do(t, s.Sentinel, []any{"127.0.0.1", strconv.Itoa(s.Master.Port)}, "SENTINEL", "get-master-addr-by-name", "mymaster")
		if role, port := info(t, s.Replica, "replication", "role"), info(t, s.Replica, "replication", "master_port"); role != "slave" || port != strconv.Itoa(s.Master.Port) {
			t.Errorf("replica: role %s, master_port %s; want slave of %d", role, port, s.Master.Port)
		}
		do(t, s.Master, "OK", "SET", "k", "v")

		// Failover: with quorum 1 the sentinel promotes the replica alone.
		s.Master.Kill()
		want := []any{"127.0.0.1", strconv.Itoa(s.Replica.Port)}
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := s.Sentinel.Do("SENTINEL", "get-master-addr-by-name", "mymaster")
			if err == nil && reflect.DeepEqual(v, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no failover: get-master-addr-by-name = %v, %v; want %v", v, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
		s.Master.Restart(t)
		pids = pidsOf(t, s.Master, s.Replica, s.Sentinel)
	})
	proctest.WaitGone(t, "after the cleanup of Sentinel", pids...)
}
