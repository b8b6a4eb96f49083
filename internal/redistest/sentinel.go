package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// SentinelServer is a master, one replica of it and one Sentinel that
// monitors it. The sentinel has quorum 1, down-after-milliseconds 2000 and
// failover-timeout 10000: killing the master promotes the replica in about
// 4s. Its fields are set once; the Servers' methods are safe for concurrent
// use.
type SentinelServer struct {
	// SentinelAddr is the sentinel's address, "127.0.0.1:port", for a
	// failover client's sentinel list.
	SentinelAddr string
	// MasterName is the name the sentinel monitors the master under,
	// "mymaster".
	MasterName string
	// Master is the master as started. After a failover it may be a
	// replica: ask the sentinel (SENTINEL get-master-addr-by-name).
	Master *Server
	// Replica is the replica as started.
	Replica *Server
	// Sentinel is the sentinel process itself, to Kill or query.
	Sentinel *Server
}

// Sentinel starts a master, a replica of it (replicaof) and a sentinel
// (redis-server --sentinel with a generated config monitoring the master
// as "mymaster" with quorum 1), and waits until the replica is in sync and
// the sentinel reports the master and the replica. WithArgs and WithACLUser
// apply to the master and the replica, WithReplicas not at all; WithTLS is
// an error. Everything is stopped and its files removed when t and its
// subtests complete. Sentinel fails the test if it cannot be started.
func Sentinel(t testing.TB, opts ...Option) *SentinelServer {
	t.Helper()
	cl := &cleanups{logf: t.Logf}
	t.Cleanup(cl.Run)
	s, err := startSentinel(cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// StartSentinel is [Sentinel] for TestMain: it returns a function that stops
// the three processes and removes their files, which the caller must call.
// On error everything started is already stopped.
func StartSentinel(opts ...Option) (*SentinelServer, func(), error) {
	cl := &cleanups{}
	s, err := startSentinel(cl, opts)
	if err != nil {
		cl.Run()
		return nil, nil, err
	}
	return s, cl.Run, nil
}

const masterName = "mymaster"

func startSentinel(cl *cleanups, opts []Option) (*SentinelServer, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.tls {
		return nil, errors.New("redistest: WithTLS: not supported by Sentinel, only by Standalone and Cluster")
	}
	deadline := time.Now().Add(cfg.startTimeout)
	master, err := launch(cfg, cl, false, func(b binary, port int, dir string) ([]string, error) {
		return dataArgs(cfg, b, port, dir), nil
	})
	if err != nil {
		return nil, err
	}
	replica, err := launch(cfg, cl, false, func(b binary, port int, dir string) ([]string, error) {
		return dataArgs(cfg, b, port, dir, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port)), nil
	})
	if err != nil {
		return nil, err
	}
	// In sync before the sentinel starts, so that its first INFO of the
	// master already lists the replica.
	err = waitFor(deadline, cfg.startTimeout, "replica in sync", []*Server{master, replica}, func() error {
		v, err := replica.Do("INFO", "replication")
		if err != nil {
			return err
		}
		info, _ := v.(string)
		if infoField(info, "master_link_status") != "up" || infoField(info, "master_sync_in_progress") != "0" {
			return fmt.Errorf("replica %s: master_link_status:%s", replica.Addr, infoField(info, "master_link_status"))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sentinel, err := launch(cfg, cl, false, func(b binary, port int, dir string) ([]string, error) {
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %q\n"+
			"sentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %[3]s 2000\n"+
			"sentinel failover-timeout %[3]s 10000\n",
			port, dir, masterName, master.Port)
		// The sentinel rewrites its config file: it must be writable.
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("redistest: %w", err)
		}
		return []string{conf, "--sentinel"}, nil
	})
	if err != nil {
		return nil, err
	}
	s := &SentinelServer{
		SentinelAddr: sentinel.Addr,
		MasterName:   masterName,
		Master:       master,
		Replica:      replica,
		Sentinel:     sentinel,
	}
	err = waitFor(deadline, cfg.startTimeout, "sentinel ready", []*Server{master, replica, sentinel}, func() error {
		v, err := sentinel.Do("SENTINEL", "get-master-addr-by-name", masterName)
		if err != nil {
			return err
		}
		if a, ok := v.([]any); !ok || len(a) != 2 || a[0] != "127.0.0.1" || a[1] != strconv.Itoa(master.Port) {
			return fmt.Errorf("SENTINEL get-master-addr-by-name %s = %v, want [127.0.0.1 %d]", masterName, v, master.Port)
		}
		v, err = sentinel.Do("SENTINEL", "replicas", masterName)
		if err != nil {
			return err
		}
		list, _ := v.([]any)
		for _, r := range list {
			f := pairs(r)
			if f["name"] == replica.Addr && f["flags"] == "slave" && f["master-link-status"] == "ok" {
				return nil
			}
		}
		return fmt.Errorf("sentinel does not list replica %s as healthy yet: %v", replica.Addr, v)
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// pairs turns a flat [field value ...] reply into a map.
func pairs(v any) map[string]any {
	a, _ := v.([]any)
	m := make(map[string]any, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		if k, ok := a[i].(string); ok {
			m[k] = a[i+1]
		}
	}
	return m
}
