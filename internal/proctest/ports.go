package proctest

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
)

// ErrAddrInUse reports that a server could not bind its port: another
// process took it between its choice and the server's bind. [TryPorts]
// starts again on another port; a restart waits for the port instead.
var ErrAddrInUse = errors.New("address already in use")

// maxBindAttempts is how many ports TryPorts tries.
const maxBindAttempts = 5

// addrInUse reports whether a server's log says it could not bind its
// port: redis-server and PostgreSQL quote strerror(EADDRINUSE), "Address
// already in use", Go programs the same in lower case.
func addrInUse(log string) bool {
	return strings.Contains(strings.ToLower(log), "address already in use")
}

// Ports handed out by this test binary, never handed out again, so that two
// servers of one binary cannot race for the same port.
var (
	portsMu    sync.Mutex
	portsTaken = map[int]bool{}
)

// FreePort returns a port of 127.0.0.1 that is free now and that FreePort
// has not returned before in this test binary; with offsets, port+offset
// must be a valid port, free and never returned too, for each offset (a
// Redis Cluster node, whose bus port is port+10000, asks for
// FreePort(10000)). Those ports count as returned as well. Free means
// that [HoldPort] could bind it too: not a port whose earlier owner, in
// another test binary, closed connections first and left them in
// TIME_WAIT, which a server (binding with SO_REUSEADDR) may take but a
// hold cannot, so that the port of the server killed there would be left
// free. Another process may still take them before the server binds: see
// [TryPorts]. It is safe for concurrent use.
func FreePort(offsets ...int) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var lastErr error
	for range 200 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("proctest: no free port on 127.0.0.1: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := !portsTaken[port] && holdable(port)
		for _, off := range offsets {
			if !ok {
				break
			}
			other := port + off
			if other < 1 || other > 65535 || portsTaken[other] {
				ok = false
			} else if ol, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(other))); err != nil {
				ok, lastErr = false, err
			} else {
				ol.Close()
				ok = holdable(other)
			}
		}
		if ok {
			portsTaken[port] = true
			for _, off := range offsets {
				portsTaken[port+off] = true
			}
			return port, nil
		}
	}
	if len(offsets) == 0 {
		return 0, errors.New("proctest: no free port on 127.0.0.1 after 200 tries")
	}
	return 0, fmt.Errorf("proctest: no free port on 127.0.0.1 with port+%v free too after 200 tries: %v", offsets, lastErr)
}

// holdable reports whether [HoldPort] can bind port now.
func holdable(port int) bool {
	release, err := holdPort(port)
	if err != nil {
		return false
	}
	release()
	return true
}

// TryPorts calls start with a port from pick (usually a closure over
// [FreePort]) and, each time start fails with [ErrAddrInUse], again with a
// new port, 5 ports at the most. It returns start's last error, or pick's.
// start must leave nothing running when it fails.
func TryPorts(pick func() (int, error), start func(port int) error) error {
	for attempt := 1; ; attempt++ {
		port, err := pick()
		if err != nil {
			return err
		}
		err = start(port)
		if err == nil || !errors.Is(err, ErrAddrInUse) || attempt == maxBindAttempts {
			return err
		}
	}
}

// HoldPort keeps port of 127.0.0.1 while a server is down, until release
// is called: it binds a socket to it without listening and without
// SO_REUSEADDR. Meanwhile a connection to the port is refused, as with
// nothing bound, but no other process can bind it, so a server of another
// test binary cannot start there and answer in the stopped server's place.
// It fails if the port is bound already. Off Unix it holds nothing. It is
// safe for concurrent use; release is idempotent.
func HoldPort(port int) (release func(), err error) {
	r, err := holdPort(port)
	if err != nil {
		return nil, fmt.Errorf("proctest: hold port %d: %w", port, err)
	}
	var once sync.Once
	return func() { once.Do(r) }, nil
}
