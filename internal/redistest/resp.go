package redistest

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// ReplyError is an error reply of the server, such as "MOVED 866
// 127.0.0.1:41000" or "NOSCRIPT No matching script". [Server.Do] returns it
// as its error; inside an array it is an element.
type ReplyError string

// Error returns the reply's text, without the leading '-'.
func (e ReplyError) Error() string { return string(e) }

// doTimeout bounds one Do: dial, write and read. A paused server makes Do
// fail after it.
const doTimeout = 5 * time.Second

// do sends one command on a fresh connection, over TLS with a non-nil
// tlsConfig, and reads one RESP2 reply.
func do(addr string, tlsConfig *tls.Config, timeout time.Duration, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("redistest: Do: no command")
	}
	var conn net.Conn
	var err error
	if tlsConfig == nil {
		conn, err = net.DialTimeout("tcp", addr, timeout)
	} else {
		// The handshake is bounded by the dialer's timeout as well.
		conn, err = tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, tlsConfig)
	}
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: %w", addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return nil, fmt.Errorf("redistest: %s: %w", addr, err)
	}
	w := bufio.NewWriter(conn)
	w.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		w.WriteString("$" + strconv.Itoa(len(a)) + "\r\n")
		w.WriteString(a)
		w.WriteString("\r\n")
	}
	if err := w.Flush(); err != nil {
		return nil, fmt.Errorf("redistest: %s: %s: %w", addr, args[0], err)
	}
	v, err := readReply(bufio.NewReader(conn))
	if err != nil {
		return nil, fmt.Errorf("redistest: %s: %s: %w", addr, args[0], err)
	}
	if e, ok := v.(ReplyError); ok {
		return nil, e
	}
	return v, nil
}

// readReply reads one RESP2 value: simple and bulk strings as string, nil
// bulk strings and arrays as nil, integers as int64, arrays as []any and
// errors as ReplyError.
func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return ReplyError(body), nil
	case ':':
		n, err := strconv.ParseInt(body, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed integer reply %q", body)
		}
		return n, nil
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("malformed bulk length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return nil, errors.New("malformed bulk string: missing CRLF")
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n < -1 {
			return nil, fmt.Errorf("malformed array length %q", body)
		}
		if n == -1 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			if arr[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("unsupported reply type %q (RESP2 only)", kind)
	}
}
