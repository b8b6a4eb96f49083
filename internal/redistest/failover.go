package redistest

import (
	"fmt"
	"net"
)

// MasterAddr returns the address, "127.0.0.1:port", of the master the
// sentinel names now (SENTINEL get-master-addr-by-name). It changes from
// Master's to Replica's once the sentinel has promoted the replica after the
// master died: the same moment the sentinel tells failover clients to switch
// (+switch-master). It is safe for concurrent use.
func (s *SentinelServer) MasterAddr() (string, error) {
	v, err := s.Sentinel.Do("SENTINEL", "get-master-addr-by-name", s.MasterName)
	if err != nil {
		return "", err
	}
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("redistest: SENTINEL get-master-addr-by-name %s = %v, want [host port]", s.MasterName, v)
	}
	host, ok1 := a[0].(string)
	port, ok2 := a[1].(string)
	if !ok1 || !ok2 {
		return "", fmt.Errorf("redistest: SENTINEL get-master-addr-by-name %s = %v, want two strings", s.MasterName, v)
	}
	return net.JoinHostPort(host, port), nil
}
