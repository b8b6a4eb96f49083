package redistest_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/bucketry/ratelimit/internal/redistest"
)

func TestWithMastersRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		n    int
		want string
	}{
		{"zero", 0, "redistest: WithMasters: count must be between 1 and 16384, got 0"},
		{"negative", -2, "redistest: WithMasters: count must be between 1 and 16384, got -2"},
		{"more than the slots", redistest.SlotCount + 1, "redistest: WithMasters: count must be between 1 and 16384, got 16385"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stop, err := redistest.StartCluster(redistest.WithMasters(tc.n))
			if err == nil || err.Error() != tc.want {
				if stop != nil {
					stop()
				}
				t.Fatalf("StartCluster(WithMasters(%d)) error = %v, want %q", tc.n, err, tc.want)
			}
		})
	}
}

// TestWithMasters starts clusters of other sizes than the default 3 and
// checks the layout the documentation promises: master i owns slots
// [i*16384/n, (i+1)*16384/n), Replicas[j] replicates Masters[j%n], and a key
// of every master's range is stored on that master and read back.
func TestWithMasters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		masters, replicas int
	}{
		{"1 master", 1, 0},
		{"6 masters", 6, 0},
		{"2 masters with 1 replica each", 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.Cluster(t, redistest.WithMasters(tc.masters), redistest.WithReplicas(tc.replicas))
			n, total := tc.masters, tc.masters*(1+tc.replicas)
			if len(c.Masters) != n || len(c.Replicas) != n*tc.replicas || len(c.Nodes()) != total || len(c.Addrs()) != n {
				t.Fatalf("Masters %d, Replicas %d, Nodes %d, Addrs %d; want %d, %d, %d, %d",
					len(c.Masters), len(c.Replicas), len(c.Nodes()), len(c.Addrs()), n, n*tc.replicas, total, n)
			}
			c.WaitHealthy(t)
			for _, node := range c.Nodes() {
				for field, want := range map[string]string{
					"cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_slots_ok": "16384",
					"cluster_known_nodes": strconv.Itoa(total), "cluster_size": strconv.Itoa(n),
				} {
					v, err := node.Do("CLUSTER", "INFO")
					text, _ := v.(string)
					if err != nil || !strings.Contains(text, field+":"+want+"\r\n") {
						t.Errorf("%s: CLUSTER INFO has no %s:%s: %q, %v", node.Addr, field, want, text, err)
					}
				}
			}

			// Every slot is owned once, by the master the layout names.
			owners := make([]string, redistest.SlotCount)
			v, err := c.Masters[0].Do("CLUSTER", "SLOTS")
			ranges, ok := v.([]any)
			if err != nil || !ok {
				t.Fatalf("CLUSTER SLOTS = %#v, %v", v, err)
			}
			for _, r := range ranges {
				r, _ := r.([]any)
				if len(r) < 3 {
					t.Fatalf("CLUSTER SLOTS entry %#v, want at least 3 elements", r)
				}
				lo, _ := r[0].(int64)
				hi, _ := r[1].(int64)
				m := nodeAddr(r[2])
				for s := lo; s <= hi; s++ {
					if owners[s] != "" {
						t.Fatalf("CLUSTER SLOTS gives slot %d to %s and %s", s, owners[s], m)
					}
					owners[s] = m
				}
			}
			for i, m := range c.Masters {
				lo, hi := i*redistest.SlotCount/n, (i+1)*redistest.SlotCount/n-1
				for s := lo; s <= hi; s++ {
					if owners[s] != m.Addr {
						t.Fatalf("CLUSTER SLOTS gives slot %d to %q, want Masters[%d] %s", s, owners[s], i, m.Addr)
					}
				}
				for _, s := range []int{lo, hi} {
					if o := c.SlotOwner(s); o != m {
						t.Errorf("SlotOwner(%d) = %v, want Masters[%d] %s", s, o, i, m.Addr)
					}
				}
			}
			// CLUSTER SLOTS lists a replica only once its master has heard
			// its replication offset over the bus, so ask the replicas.
			for j, r := range c.Replicas {
				m := c.Masters[j%n]
				if role, port := info(t, r, "replication", "role"), info(t, r, "replication", "master_port"); role != "slave" || port != strconv.Itoa(m.Port) {
					t.Errorf("Replicas[%d] %s: role %s, master_port %s; want slave of %d", j, r.Addr, role, port, m.Port)
				}
			}

			// A key of each master's range round-trips on that master and is
			// redirected by every other master.
			for i, m := range c.Masters {
				key := keyIn(i*redistest.SlotCount/n, (i+1)*redistest.SlotCount/n-1)
				value := "v" + strconv.Itoa(i)
				do(t, m, "OK", "SET", key, value)
				do(t, m, value, "GET", key)
				moved := fmt.Sprintf("MOVED %d %s", redistest.KeySlot(key), m.Addr)
				for _, other := range c.Masters {
					if other == m {
						continue
					}
					if _, err := other.Do("GET", key); err == nil || err.Error() != moved {
						t.Errorf("%s: GET %q error = %v, want %q", other.Addr, key, err, moved)
					}
				}
			}
		})
	}
}

// nodeAddr reads "ip:port" from a node of a CLUSTER SLOTS entry.
func nodeAddr(v any) string {
	n, _ := v.([]any)
	if len(n) < 2 {
		return fmt.Sprintf("%v", v)
	}
	return fmt.Sprintf("%v:%v", n[0], n[1])
}

// keyIn returns the first key "key:<i>" whose hash slot is in [lo, hi].
func keyIn(lo, hi int) string {
	for i := 0; ; i++ {
		key := "key:" + strconv.Itoa(i)
		if s := redistest.KeySlot(key); lo <= s && s <= hi {
			return key
		}
	}
}
