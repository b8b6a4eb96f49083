package redistest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// SlotCount is the number of hash slots of a Redis Cluster.
	SlotCount = 16384
	// clusterMasters is how many masters a test cluster has without
	// WithMasters.
	clusterMasters = 3
)

// ClusterServer is a Redis Cluster of n masters (3 unless [WithMasters]
// says otherwise), each with the replicas asked for by [WithReplicas]. Its
// methods are safe for concurrent use.
type ClusterServer struct {
	// Masters are the n masters as the cluster started, in slot order:
	// Masters[i] owns slots [i*16384/n, (i+1)*16384/n), integer division,
	// so the slots are split as evenly as they divide. After a failover a
	// replica may own them instead: SlotOwner tells.
	Masters []*Server
	// Replicas are the replicas as the cluster started: Replicas[j]
	// replicates Masters[j%n]. Empty without WithReplicas.
	Replicas []*Server

	timeout   time.Duration
	tlsConfig *tls.Config // the client side of WithTLS, nil without it
}

// Cluster starts a Redis Cluster of 3 masters ([WithMasters] changes the
// count) on free loopback ports (bus port = port+10000), assigns all 16384
// slots, evenly split (see [ClusterServer.Masters]), and waits until every node
// reports cluster_state:ok, every node agrees on who owns each slot and, with
// WithReplicas, every replica is in sync. Nodes run with
// --cluster-node-timeout 2000 and announce 127.0.0.1. The cluster is stopped
// and its files removed when t and its subtests complete. Cluster fails the
// test if it cannot be started.
func Cluster(t testing.TB, opts ...Option) *ClusterServer {
	t.Helper()
	cl := &cleanups{logf: t.Logf}
	t.Cleanup(cl.Run)
	c, err := startCluster(cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartCluster is [Cluster] for TestMain: it returns a function that stops
// every node and removes their files, which the caller must call. On error
// everything started is already stopped.
func StartCluster(opts ...Option) (*ClusterServer, func(), error) {
	cl := &cleanups{}
	c, err := startCluster(cl, opts)
	if err != nil {
		cl.Run()
		return nil, nil, err
	}
	return c, cl.Run, nil
}

// Addrs returns the addresses of the masters the cluster started with, the
// seed list for a cluster client, which discovers the other nodes itself.
func (c *ClusterServer) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, m := range c.Masters {
		addrs[i] = m.Addr
	}
	return addrs
}

// Nodes returns every node: the masters, then the replicas, as the cluster
// started. Use it to read or reset per-node statistics
// (CommandCalls, CONFIG RESETSTAT) or to flush the data (FLUSHALL on the
// masters; replicas refuse writes).
func (c *ClusterServer) Nodes() []*Server {
	return slices.Concat(c.Masters, c.Replicas)
}

// SlotOwner returns the node that owns slot now, according to CLUSTER NODES
// of the first running node that answers, or nil if none answers or the
// slot has no live owner.
func (c *ClusterServer) SlotOwner(slot int) *Server {
	for _, n := range c.Nodes() {
		if !n.running() {
			continue
		}
		view, err := clusterNodes(n)
		if err != nil {
			continue
		}
		for _, e := range view {
			if e.has("master") && !e.has("fail") && e.owns(slot) {
				return c.node(e.addr)
			}
		}
		return nil
	}
	return nil
}

// WaitHealthy waits until every running node reports cluster_state:ok,
// knows every other running node as healthy, and all agree that every slot
// is owned by a running master, and every running replica is in sync with
// its master. Call it after Kill or Restart, before the next check: a killed
// master with replicas is replaced after 4 to 5s (2s node timeout, failure
// reports, then an election); one without replicas leaves its slots
// uncovered, so the cluster stays down until it is restarted, and once its
// peers have marked it failed they take it back only 4s (twice the node
// timeout) after that, so WaitHealthy after such a Restart takes several
// seconds. WaitHealthy fails t after the start timeout.
func (c *ClusterServer) WaitHealthy(t testing.TB) {
	t.Helper()
	err := waitFor(time.Now().Add(c.timeout), c.timeout, "cluster healthy", c.Nodes(), func() error {
		return c.check(false)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (c *ClusterServer) node(addr string) *Server {
	for _, n := range c.Nodes() {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// slotRange returns the first and last slot of master i of a cluster of n
// masters: [i*16384/n, (i+1)*16384/n), so that range sizes differ by at most
// one slot.
func slotRange(i, n int) (first, last int) {
	return i * SlotCount / n, (i+1)*SlotCount/n - 1
}

func startCluster(cl *cleanups, opts []Option) (*ClusterServer, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	masters := cfg.masters
	n := masters * (1 + cfg.replicas)
	nodes := make([]*Server, n)
	errs := make([]error, n)
	argsFor := func(b binary, port int, dir string) ([]string, error) {
		extra := []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
			"--cluster-announce-ip", "127.0.0.1",
		}
		if cfg.certs != nil {
			// The bus and replication over TLS too: nodes then announce
			// their TLS port, and the bus listens on it plus 10000.
			extra = append(extra, "--tls-cluster", "yes", "--tls-replication", "yes")
		}
		return dataArgs(cfg, b, port, dir, extra...), nil
	}
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() { nodes[i], errs[i] = launch(cfg, cl, true, argsFor) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c := &ClusterServer{Masters: nodes[:masters], Replicas: nodes[masters:], timeout: cfg.startTimeout}
	if cfg.certs != nil {
		c.tlsConfig = cfg.certs.client
	}
	deadline := time.Now().Add(cfg.startTimeout)

	// As redis-cli --cluster create does: distinct config epochs, so that no
	// collision has to be resolved, slots, then one node meets all others.
	for i, m := range c.Masters {
		if _, err := m.Do("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return nil, fmt.Errorf("redistest: %s: CLUSTER SET-CONFIG-EPOCH: %w", m.Addr, err)
		}
		first, last := slotRange(i, masters)
		// ADDSLOTS, not ADDSLOTSRANGE, which needs Redis 7.
		args := []string{"CLUSTER", "ADDSLOTS"}
		for s := first; s <= last; s++ {
			args = append(args, strconv.Itoa(s))
		}
		if _, err := m.Do(args...); err != nil {
			return nil, fmt.Errorf("redistest: %s: CLUSTER ADDSLOTS %d-%d: %w", m.Addr, first, last, err)
		}
	}
	ids := make([]string, n)
	for i, node := range nodes {
		v, err := node.Do("CLUSTER", "MYID")
		id, _ := v.(string)
		if err != nil || id == "" {
			return nil, fmt.Errorf("redistest: %s: CLUSTER MYID = %v, %v", node.Addr, v, err)
		}
		ids[i] = id
	}
	for _, node := range nodes[1:] {
		if _, err := nodes[0].Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(node.Port)); err != nil {
			return nil, fmt.Errorf("redistest: %s: CLUSTER MEET %s: %w", nodes[0].Addr, node.Addr, err)
		}
	}
	// A replica can only replicate a master it knows.
	err = waitFor(deadline, cfg.startTimeout, "cluster nodes meeting", nodes, func() error {
		for _, node := range nodes {
			view, err := clusterNodes(node)
			if err != nil {
				return err
			}
			for _, id := range ids {
				e := view.byID(id)
				if e == nil || e.has("handshake") || e.has("noaddr") {
					return fmt.Errorf("%s does not know node %s yet", node.Addr, id)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for j, r := range c.Replicas {
		if _, err := r.Do("CLUSTER", "REPLICATE", ids[j%masters]); err != nil {
			return nil, fmt.Errorf("redistest: %s: CLUSTER REPLICATE %s: %w", r.Addr, ids[j%masters], err)
		}
	}
	err = waitFor(deadline, cfg.startTimeout, "cluster ready", nodes, func() error { return c.check(true) })
	if err != nil {
		return nil, err
	}
	return c, nil
}

// check returns nil if the cluster is healthy (see WaitHealthy); initial
// also requires the layout the cluster was built with.
func (c *ClusterServer) check(initial bool) error {
	var live []*Server
	isLive := make(map[string]bool)
	for _, n := range c.Nodes() {
		if n.running() {
			live = append(live, n)
			isLive[n.Addr] = true
		}
	}
	if len(live) == 0 {
		return errors.New("no node is running")
	}
	var first []string // slot -> master address, as the first live node sees it
	for _, n := range live {
		v, err := n.Do("CLUSTER", "INFO")
		if err != nil {
			return err
		}
		info, _ := v.(string)
		if state := infoField(info, "cluster_state"); state != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", n.Addr, state)
		}
		view, err := clusterNodes(n)
		if err != nil {
			return err
		}
		for _, m := range live {
			e := view.byAddr(m.Addr)
			if e == nil {
				return fmt.Errorf("%s does not know %s", n.Addr, m.Addr)
			}
			for _, bad := range []string{"fail", "fail?", "handshake", "noaddr"} {
				if e.has(bad) {
					return fmt.Errorf("%s sees %s as %s", n.Addr, m.Addr, strings.Join(e.flags, ","))
				}
			}
			if !e.has("myself") && e.link != "connected" {
				return fmt.Errorf("%s: link to %s is %s", n.Addr, m.Addr, e.link)
			}
		}
		owners := view.slotOwners()
		for slot, addr := range owners {
			if addr == "" {
				return fmt.Errorf("%s: slot %d has no owner", n.Addr, slot)
			}
			if !isLive[addr] {
				return fmt.Errorf("%s: slot %d is owned by %s, which is not running", n.Addr, slot, addr)
			}
		}
		if first == nil {
			first = owners
		} else if i := firstDiff(first, owners); i >= 0 {
			return fmt.Errorf("%s says %s owns slot %d, %s says %s", live[0].Addr, first[i], i, n.Addr, owners[i])
		}
		if initial {
			for i, m := range c.Masters {
				lo, hi := slotRange(i, len(c.Masters))
				for s := lo; s <= hi; s++ {
					if owners[s] != m.Addr {
						return fmt.Errorf("%s says %s owns slot %d, want %s", n.Addr, owners[s], s, m.Addr)
					}
				}
			}
			for j, r := range c.Replicas {
				e, m := view.byAddr(r.Addr), view.byAddr(c.Masters[j%len(c.Masters)].Addr)
				if !e.has("slave") || e.master != m.id {
					return fmt.Errorf("%s does not see %s as a replica of %s yet", n.Addr, r.Addr, m.addr)
				}
			}
		}
		if me := view.myself(); me != nil && me.has("slave") {
			v, err := n.Do("INFO", "replication")
			if err != nil {
				return err
			}
			info, _ := v.(string)
			if infoField(info, "master_link_status") != "up" || infoField(info, "master_sync_in_progress") != "0" {
				return fmt.Errorf("replica %s not in sync with its master yet", n.Addr)
			}
		}
	}
	return nil
}

func firstDiff(a, b []string) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// nodeEntry is one line of CLUSTER NODES:
// <id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv> <config-epoch> <link-state> <slot> ...
type nodeEntry struct {
	id, addr, master, link string
	flags                  []string
	slots                  [][2]int // inclusive ranges
}

func (e *nodeEntry) has(flag string) bool { return e != nil && slices.Contains(e.flags, flag) }

func (e *nodeEntry) owns(slot int) bool {
	for _, r := range e.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

type clusterView []nodeEntry

func clusterNodes(s *Server) (clusterView, error) {
	v, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	text, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("%s: CLUSTER NODES replied %T, want a string", s.Addr, v)
	}
	return parseClusterNodes(text)
}

func parseClusterNodes(text string) (clusterView, error) {
	var view clusterView
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		e := nodeEntry{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3], link: f[7]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("malformed slot %q in CLUSTER NODES line %q", s, line)
			}
			e.slots = append(e.slots, [2]int{a, b})
		}
		view = append(view, e)
	}
	return view, nil
}

func (v clusterView) byID(id string) *nodeEntry {
	for i := range v {
		if v[i].id == id {
			return &v[i]
		}
	}
	return nil
}

func (v clusterView) byAddr(addr string) *nodeEntry {
	for i := range v {
		if v[i].addr == addr {
			return &v[i]
		}
	}
	return nil
}

func (v clusterView) myself() *nodeEntry {
	for i := range v {
		if v[i].has("myself") {
			return &v[i]
		}
	}
	return nil
}

// slotOwners maps every slot to the address of the live master that owns
// it, "" for none.
func (v clusterView) slotOwners() []string {
	owners := make([]string, SlotCount)
	for _, e := range v {
		if !e.has("master") || e.has("fail") {
			continue
		}
		for _, r := range e.slots {
			for s := r[0]; s <= r[1] && s < SlotCount; s++ {
				owners[s] = e.addr
			}
		}
	}
	return owners
}

// KeySlot returns the hash slot of key, as CLUSTER KEYSLOT does: CRC16
// (XMODEM) mod 16384 of the key, or of its hash tag, the text between the
// first '{' and the first '}' after it, if that text is not empty. So
// "{user}a" and "{user}b" share a slot, while "a{}b" and "{}{x}" hash whole.
// It is pure and safe for concurrent use.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % SlotCount)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// of the Redis Cluster specification.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
