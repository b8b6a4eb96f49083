//go:build unix

package proctest

import (
	"os"
	"syscall"
)

var (
	// sigTerm is the default stop signal.
	sigTerm os.Signal = syscall.SIGTERM
	// sigCont follows the stop signal: a stopped (paused) process must run
	// to handle it.
	sigCont os.Signal = syscall.SIGCONT
)

// holdPort binds a socket to 127.0.0.1:port without listening and without
// SO_REUSEADDR. While it is open, a connection to the port is refused, as
// with nothing bound, but no other process can bind the port, and a kernel
// picking a free port skips it.
func holdPort(port int) (release func(), err error) {
	// Close-on-exec, so that no server started meanwhile inherits it; as
	// the net package does where SOCK_CLOEXEC is missing (macOS).
	syscall.ForkLock.RLock()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return func() { syscall.Close(fd) }, nil
}
