package proctest

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A port taken between its choice and the server's bind: the server
// notices (even though the thief accepts connections) and TryPorts starts
// it on another.
func TestTryPortsStolenPort(t *testing.T) {
	t.Parallel()
	var stolen []int
	pick := func() (int, error) {
		port, err := FreePort()
		if err != nil || len(stolen) == 2 {
			return port, err
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		stolen = append(stolen, port)
		return port, nil
	}
	var s *Server
	var tried []int
	err := TryPorts(pick, func(port int) error {
		tried = append(tried, port)
		s = newFake(t, port, "")
		return s.Start(time.Now().Add(20 * time.Second))
	})
	if err != nil {
		t.Fatalf("TryPorts with two stolen ports: %v", err)
	}
	if len(stolen) != 2 || len(tried) != 3 || tried[2] == stolen[0] || tried[2] == stolen[1] {
		t.Fatalf("tried %v, stolen %v: want a third port", tried, stolen)
	}
	if s.Addr() != net.JoinHostPort("127.0.0.1", strconv.Itoa(tried[2])) {
		t.Fatalf("Addr() = %s, want the third port %d", s.Addr(), tried[2])
	}
	checkAnswers(t, s)
}

func TestTryPorts(t *testing.T) {
	t.Parallel()
	errOther := errors.New("other")
	errPick := errors.New("pick")
	for _, tc := range []struct {
		name      string
		results   []error // start's, in turn; the last repeats
		pickFails bool
		want      error
		tries     int
	}{
		{"first port", []error{nil}, false, nil, 1},
		{"third port", []error{ErrAddrInUse, ErrAddrInUse, nil}, false, nil, 3},
		{"another error", []error{ErrAddrInUse, errOther}, false, errOther, 2},
		{"always in use", []error{ErrAddrInUse}, false, ErrAddrInUse, 5},
		{"no port", []error{nil}, true, errPick, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := 1000
			pick := func() (int, error) {
				if tc.pickFails {
					return 0, errPick
				}
				next++
				return next, nil
			}
			var ports []int
			err := TryPorts(pick, func(port int) error {
				ports = append(ports, port)
				return tc.results[min(len(ports), len(tc.results))-1]
			})
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) || len(ports) != tc.tries {
				t.Fatalf("TryPorts = %v after ports %v; want %v after %d", err, ports, tc.want, tc.tries)
			}
			for i := 1; i < len(ports); i++ {
				if ports[i] == ports[i-1] {
					t.Fatalf("TryPorts tried port %d twice in a row", ports[i])
				}
			}
		})
	}
}

// Not parallel: the other tests' connections take ephemeral ports, which
// may be one FreePort just returned (TryPorts is for that).
func TestFreePort(t *testing.T) {
	seen := make(map[int]bool)
	for i := range 40 {
		var offsets []int
		if i%2 == 0 {
			offsets = []int{10000}
		}
		port, err := FreePort(offsets...)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range append([]int{port}, port+10000) {
			if p == port+10000 && offsets == nil {
				continue
			}
			if seen[p] || p > 65535 {
				t.Fatalf("FreePort(%v) = %d: port %d handed out before or invalid", offsets, port, p)
			}
			seen[p] = true
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("FreePort(%v) = %d: port %d not free: %v", offsets, port, p, err)
			}
			l.Close()
		}
	}
	if port, err := FreePort(70000); err == nil || !strings.Contains(err.Error(), "proctest: no free port on 127.0.0.1 with port+[70000] free too") {
		t.Fatalf("FreePort(70000) = %d, %v; want no port", port, err)
	}
}

func TestHoldPort(t *testing.T) {
	t.Parallel()
	// Another process may take the port between FreePort and the hold, or
	// after the release before the test listens on it (a client's
	// connection is given a port of the same range): the test then starts
	// again on another port. A release that does not free the port fails
	// on every one.
	for attempt := 1; ; attempt++ {
		if holdPortOnce(t) {
			return
		}
		if attempt == maxBindAttempts {
			t.Fatalf("no port could be listened on after its release, in %d tries", attempt)
		}
	}
}

// holdPortOnce checks HoldPort on a free port; it returns false when
// another process took the port, before the hold or after its release.
func holdPortOnce(t *testing.T) bool {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	release, err := HoldPort(port)
	if errors.Is(err, syscall.EADDRINUSE) {
		// Taken since FreePort found it free.
		t.Logf("HoldPort(%d) of a free port: %v; another port", port, err)
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	CheckPortHeld(t, addr)
	if r, err := HoldPort(port); err == nil {
		r()
		t.Fatalf("HoldPort(%d) of a held port = nil error", port)
	}
	release()
	release() // idempotent
	l, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Logf("listen on %s after release: %v; another port", addr, err)
		return false
	}
	if err != nil {
		t.Fatalf("listen on %s after release: %v", addr, err)
	}
	defer l.Close()
	if r, err := HoldPort(port); err == nil || !strings.Contains(err.Error(), "proctest: hold port "+strconv.Itoa(port)+": ") {
		if r != nil {
			r()
		}
		t.Fatalf("HoldPort(%d) of a listening port = %v, want an error", port, err)
	}
	return true
}

func TestAddrInUse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, log string
		want      bool
	}{
		{"redis-server", "1:M 01 Jan 2025 00:00:00.000 # Warning: Could not create server TCP listening socket 127.0.0.1:6379: bind: Address already in use\n", true},
		{"postgres", "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use\nHINT:  Is another postmaster already running on port 5432?\n", true},
		{"go", "listen tcp 127.0.0.1:1234: bind: address already in use\n", true},
		{"another failure", "FATAL:  invalid value for parameter \"max_connections\": \"x\"\n", false},
		{"empty", "", false},
	} {
		if got := addrInUse(tc.log); got != tc.want {
			t.Errorf("addrInUse(%s log) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
