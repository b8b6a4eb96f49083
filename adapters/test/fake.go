package redistests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bucketry/ratelimit/core"
	"github.com/bucketry/ratelimit/internal/redisscript"
)

// FakeServer is a RESP server on 127.0.0.1 that answers each command with
// what its reply function returns, as raw RESP, or never when that is "".
// It answers MULTI and EXEC itself, as Redis does: QUEUED for each command
// in between, then the array of their replies. It exists for the faults a
// real server never produces (garbage replies, no reply at all). It is safe
// for concurrent use.
type FakeServer struct {
	Addr string

	ln    net.Listener
	reply func(cmd []string) string
	wg    sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	calls map[string]int // by upper-case command name
	done  bool
}

// StartFake starts a FakeServer answering with reply, which is called from
// one goroutine per connection; t's cleanup stops it.
func StartFake(t testing.TB, reply func(cmd []string) string) *FakeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fake redis: listen: %v", err)
	}
	f := &FakeServer{Addr: ln.Addr().String(), ln: ln, reply: reply, conns: map[net.Conn]struct{}{}, calls: map[string]int{}}
	f.wg.Go(f.accept)
	t.Cleanup(f.Close)
	return f
}

// Port returns the port the server listens on.
func (f *FakeServer) Port() int { return f.ln.Addr().(*net.TCPAddr).Port }

// Calls returns how many commands with one of the names (EVALSHA, GET...)
// the server has received.
func (f *FakeServer) Calls(names ...string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, name := range names {
		n += f.calls[strings.ToUpper(name)]
	}
	return n
}

// Close stops the server, closes every connection and waits for its
// goroutines. It is idempotent.
func (f *FakeServer) Close() {
	f.mu.Lock()
	f.done = true
	f.ln.Close()
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

func (f *FakeServer) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		if f.done {
			f.mu.Unlock()
			c.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.wg.Go(func() { f.serve(c) })
		f.mu.Unlock()
	}
}

func (f *FakeServer) serve(c net.Conn) {
	defer func() {
		c.Close()
		f.mu.Lock()
		delete(f.conns, c)
		f.mu.Unlock()
	}()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	var queued []string // replies between MULTI and EXEC
	multi := false
	for {
		cmd, err := ReadCommand(r)
		if err != nil {
			return
		}
		name := strings.ToUpper(cmd[0])
		f.mu.Lock()
		f.calls[name]++
		f.mu.Unlock()
		var out string
		switch {
		case name == "MULTI":
			multi, queued, out = true, queued[:0], "+OK\r\n"
		case name == "EXEC":
			multi, out = false, fmt.Sprintf("*%d\r\n%s", len(queued), strings.Join(queued, ""))
		case multi:
			queued, out = append(queued, f.reply(cmd)), "+QUEUED\r\n"
		default:
			out = f.reply(cmd)
		}
		if _, err := w.WriteString(out); err != nil {
			return
		}
		// Answer a pipeline in one write, once it is all read.
		if r.Buffered() == 0 && w.Flush() != nil {
			return
		}
	}
}

// ReadCommand reads one command: an array of bulk strings, as clients send.
func ReadCommand(r *bufio.Reader) ([]string, error) {
	header := func(kind byte) (int, error) {
		line, err := r.ReadString('\n')
		if err != nil {
			return 0, err
		}
		if len(line) < 4 || line[0] != kind || !strings.HasSuffix(line, "\r\n") {
			return 0, fmt.Errorf("fake redis: want %c, got %q", kind, line)
		}
		return strconv.Atoi(line[1 : len(line)-2])
	}
	n, err := header('*')
	if err != nil || n < 1 {
		return nil, fmt.Errorf("fake redis: bad command: %d, %v", n, err)
	}
	cmd := make([]string, n)
	for i := range cmd {
		size, err := header('$')
		if err != nil {
			return nil, err
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		cmd[i] = string(buf[:size])
	}
	return cmd, nil
}

// RespBulk is a bulk string in RESP.
func RespBulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

// RespReply is the script's reply in RESP for a call decided at at whose
// buckets answered states: its binary string.
func RespReply(at time.Time, states ...core.BucketState) string {
	return RespBulk(string(redisscript.AppendReply(nil, at, states...)))
}

// RespUndoReply is the script's reply in RESP for a take with undo: an
// array holding its binary string and the array of undo, raw RESP.
func RespUndoReply(at time.Time, undo string, states ...core.BucketState) string {
	return "*2\r\n" + RespBulk(string(redisscript.AppendReply(nil, at, states...))) + undo
}
