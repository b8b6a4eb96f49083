package grpcinterceptor

import (
	"net"
	"testing"
)

// TestAddrString: addrString spells every address as net.Addr.String does.
func TestAddrString(t *testing.T) {
	for _, a := range []net.Addr{
		&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4711},
		&net.TCPAddr{IP: net.IP{192, 0, 2, 1}, Port: 0},
		&net.TCPAddr{IP: net.ParseIP("2001:db8::1"), Port: 443},
		&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 80, Zone: "eth0"},
		&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.9"), Port: 1},
		&net.TCPAddr{IP: net.ParseIP("::"), Port: 65535},
		&net.TCPAddr{Port: 9},
		&net.TCPAddr{IP: net.IP{1, 2, 3}, Port: 9},
		&net.UnixAddr{Name: "/run/app.sock", Net: "unix"},
		&net.UnixAddr{Name: "@", Net: "unix"},
	} {
		if got, want := addrString(a), a.String(); got != want {
			t.Errorf("addrString(%#v) = %q, want %q", a, got, want)
		}
	}
}
