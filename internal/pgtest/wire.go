package pgtest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// The harness speaks just enough of the PostgreSQL frontend/backend
// protocol, version 3.0 (PostgreSQL documentation, chapter 55 "Frontend/Backend
// Protocol"), to check that a server is up and to run a statement: a startup
// message under trust authentication and simple queries, whose results come
// back as text. This keeps the package free of any database driver, so a
// test's own driver is the only one it pulls in.

// protocolVersion is 3.0: major 3 in the high 16 bits.
const protocolVersion = 3 << 16

// ServerError is an error PostgreSQL sent back (an ErrorResponse message):
// its SQLSTATE code and message, such as "42P01" and
// `relation "x" does not exist`.
type ServerError struct {
	Code    string // SQLSTATE, five characters
	Message string // the primary message
}

// Error formats the error as "pgtest: server error CODE: message".
func (e *ServerError) Error() string {
	return fmt.Sprintf("pgtest: server error %s: %s", e.Code, e.Message)
}

// conn is one protocol connection. It is not safe for concurrent use.
type conn struct {
	c net.Conn
	r *bufio.Reader
}

// dial connects to addr on network ("tcp", or "unix" for the socket in the
// server's directory), as user to database, with every read and write of
// the connection bounded by the deadline.
func dial(network, addr, user, database string, deadline time.Time) (*conn, error) {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(deadline)
	cn := &conn{c: c, r: bufio.NewReader(c)}
	// StartupMessage: length, version, then name/value pairs ending in an
	// empty name.
	body := binary.BigEndian.AppendUint32(nil, protocolVersion)
	for _, kv := range [][2]string{{"user", user}, {"database", database}, {"application_name", "pgtest"}} {
		body = append(append(body, kv[0]...), 0)
		body = append(append(body, kv[1]...), 0)
	}
	body = append(body, 0)
	msg := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	if _, err := c.Write(append(msg, body...)); err != nil {
		c.Close()
		return nil, err
	}
	for {
		typ, payload, err := cn.read()
		if err != nil {
			c.Close()
			return nil, err
		}
		switch typ {
		case 'R':
			if len(payload) < 4 {
				c.Close()
				return nil, errors.New("pgtest: malformed authentication message")
			}
			if code := binary.BigEndian.Uint32(payload); code != 0 {
				c.Close()
				return nil, fmt.Errorf("pgtest: server asks for authentication method %d; the harness needs trust authentication", code)
			}
		case 'E':
			c.Close()
			return nil, parseError(payload)
		case 'Z':
			return cn, nil
		}
		// ParameterStatus, BackendKeyData and notices: nothing to do.
	}
}

// read returns the next message's type and payload.
func (cn *conn) read() (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(cn.r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n < 4 || n > 64<<20 {
		return 0, nil, fmt.Errorf("pgtest: message %q of impossible length %d", head[0], n)
	}
	payload := make([]byte, n-4)
	if _, err := io.ReadFull(cn.r, payload); err != nil {
		return 0, nil, err
	}
	return head[0], payload, nil
}

// query runs sql, which may hold several statements, with the simple query
// protocol and returns the rows of every statement as text, a NULL as "".
// The first error the server reports is returned after the server is ready
// for the next query.
func (cn *conn) query(sql string) ([][]string, error) {
	msg := append([]byte{'Q'}, binary.BigEndian.AppendUint32(nil, uint32(4+len(sql)+1))...)
	msg = append(append(msg, sql...), 0)
	if _, err := cn.c.Write(msg); err != nil {
		return nil, err
	}
	var rows [][]string
	var firstErr error
	for {
		typ, payload, err := cn.read()
		if err != nil {
			return nil, err
		}
		switch typ {
		case 'D':
			row, err := parseDataRow(payload)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		case 'E':
			if firstErr == nil {
				firstErr = parseError(payload)
			}
		case 'Z':
			return rows, firstErr
		}
		// RowDescription, CommandComplete, EmptyQueryResponse, notices.
	}
}

// close ends the session by closing the connection, without a Terminate
// message: the server ends an idle session on the end of the stream just
// as quietly, and the harness's side closes first for sure, so the
// connection's TIME_WAIT stays on the harness's port rather than the
// server's, where it would keep Stop from holding the port (see
// proctest.HoldPort).
func (cn *conn) close() { cn.c.Close() }

// parseDataRow reads a DataRow: a column count, then each column's length
// (-1 for NULL) and bytes.
func parseDataRow(p []byte) ([]string, error) {
	bad := errors.New("pgtest: malformed data row")
	if len(p) < 2 {
		return nil, bad
	}
	n := int(binary.BigEndian.Uint16(p))
	p = p[2:]
	row := make([]string, n)
	for i := range row {
		if len(p) < 4 {
			return nil, bad
		}
		l := int32(binary.BigEndian.Uint32(p))
		p = p[4:]
		if l < 0 {
			continue
		}
		if int(l) > len(p) {
			return nil, bad
		}
		row[i] = string(p[:l])
		p = p[l:]
	}
	return row, nil
}

// parseError reads the fields of an ErrorResponse: a type byte and a
// string each, ending in a zero byte.
func parseError(p []byte) *ServerError {
	e := &ServerError{}
	for len(p) > 0 && p[0] != 0 {
		field := p[0]
		value, rest, _ := strings.Cut(string(p[1:]), "\x00")
		p = []byte(rest)
		switch field {
		case 'C':
			e.Code = value
		case 'M':
			e.Message = value
		}
	}
	return e
}
