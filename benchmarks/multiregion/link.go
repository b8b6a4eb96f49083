package multiregion

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The kinds of message regions exchange.
const (
	kindReport      = 'R' // budgets: a region's demand in an epoch (A: epoch, B: requests)
	kindAck         = 'A' // budgets: the sender has every report of an epoch (A: epoch)
	kindConsumption = 'C' // reconciliation: tokens the sender admitted since it started (A: total, B: snapshot time, Unix ns)
)

// message is one line on a link: "<kind> <from> <a> <b>\n".
type message struct {
	kind byte
	from int
	a, b int64
}

func (m message) append(buf []byte) []byte {
	buf = append(buf, m.kind, ' ')
	buf = strconv.AppendInt(buf, int64(m.from), 10)
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, m.a, 10)
	buf = append(buf, ' ')
	buf = strconv.AppendInt(buf, m.b, 10)
	return append(buf, '\n')
}

// parseMessage reads a line written by message.append, without its newline.
func parseMessage(line string) (message, error) {
	f := strings.Fields(line)
	if len(f) != 4 || len(f[0]) != 1 {
		return message{}, fmt.Errorf("multiregion: malformed message %q", line)
	}
	from, err1 := strconv.Atoi(f[1])
	a, err2 := strconv.ParseInt(f[2], 10, 64)
	b, err3 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || from < 0 {
		return message{}, fmt.Errorf("multiregion: malformed message %q", line)
	}
	return message{kind: f[0][0], from: from, a: a, b: b}, nil
}

// inbox receives a region's messages: it listens on 127.0.0.1 and calls
// handle with every well-formed message, from one goroutine per connection
// (so concurrently). A malformed line closes its connection.
type inbox struct {
	ln     net.Listener
	handle func(message)

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

func newInbox(handle func(message)) (*inbox, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("multiregion: inbox: %w", err)
	}
	in := &inbox{ln: ln, handle: handle, conns: map[net.Conn]struct{}{}}
	in.wg.Add(1)
	go in.accept()
	return in, nil
}

func (in *inbox) addr() string { return in.ln.Addr().String() }

func (in *inbox) accept() {
	defer in.wg.Done()
	for {
		c, err := in.ln.Accept()
		if err != nil {
			return
		}
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			c.Close()
			return
		}
		in.conns[c] = struct{}{}
		in.wg.Add(1)
		in.mu.Unlock()
		go in.read(c)
	}
}

func (in *inbox) read(c net.Conn) {
	defer in.wg.Done()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		m, err := parseMessage(sc.Text())
		if err != nil {
			break
		}
		in.handle(m)
	}
	c.Close()
	in.mu.Lock()
	delete(in.conns, c)
	in.mu.Unlock()
}

func (in *inbox) close() {
	in.mu.Lock()
	in.closed = true
	in.ln.Close()
	for c := range in.conns {
		c.Close()
	}
	in.mu.Unlock()
	in.wg.Wait()
}

// outboxLen is how many messages an outbox holds for sending; more are
// dropped, as a full network buffer would.
const outboxLen = 256

// outbox sends messages to one inbox, through whatever route its address
// names, from a goroutine of its own: send never blocks. A message that
// cannot be written (the link is down, the queue is full) is lost, and
// the next one redials; the protocols that use it tolerate loss.
type outbox struct {
	addr  string
	queue chan message
	done  chan struct{}

	sent    atomic.Int64 // messages written to a connection
	dropped atomic.Int64 // messages lost before that
}

func newOutbox(addr string) *outbox {
	o := &outbox{addr: addr, queue: make(chan message, outboxLen), done: make(chan struct{})}
	go o.run()
	return o
}

// send queues m, or drops it if the queue is full.
func (o *outbox) send(m message) {
	select {
	case o.queue <- m:
	default:
		o.dropped.Add(1)
	}
}

// close stops the outbox, dropping what it still holds.
func (o *outbox) close() {
	close(o.queue)
	<-o.done
}

func (o *outbox) run() {
	defer close(o.done)
	var conn net.Conn
	var dead chan struct{} // closed when the peer closes conn
	buf := make([]byte, 0, 64)
	for m := range o.queue {
		if conn != nil {
			select {
			case <-dead:
				conn.Close()
				conn = nil
			default:
			}
		}
		if conn == nil {
			c, err := net.DialTimeout("tcp", o.addr, time.Second)
			if err != nil {
				o.dropped.Add(1)
				continue
			}
			conn, dead = c, make(chan struct{})
			// The inbox never writes: a read ends when the connection
			// does, which a write alone would notice only later.
			go func(c net.Conn, dead chan struct{}) {
				io.Copy(io.Discard, c)
				close(dead)
			}(c, dead)
		}
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		if _, err := conn.Write(m.append(buf[:0])); err != nil {
			o.dropped.Add(1)
			conn.Close()
			conn = nil
			continue
		}
		o.sent.Add(1)
	}
	if conn != nil {
		conn.Close()
	}
}
