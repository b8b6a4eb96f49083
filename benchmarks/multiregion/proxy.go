package multiregion

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrClosed is returned by a Proxy or a Net used after Close.
var ErrClosed = errors.New("multiregion: closed")

// chunkSize is the most a proxy reads at once; each read is one delayed
// chunk.
const chunkSize = 32 << 10

// queueLen is how many chunks a direction of a proxied connection holds
// while they wait out the latency; a full queue stops reading, which TCP
// turns into back-pressure on the sender.
const queueLen = 1024

// dialTimeout bounds the proxy's dial to its target.
const dialTimeout = 2 * time.Second

// Proxy is a loopback TCP proxy that stands for the link between two
// regions: it listens on 127.0.0.1 (a free port), forwards every connection
// to one target address, and delays every chunk of bytes by a fixed one-way
// latency in each direction, so that a request and its answer cost twice the
// latency more than a direct connection. Chunks keep their order and are
// pipelined: a stream of bytes is delayed, not slowed.
//
// Cut simulates a partition: it drops every connection in flight and
// swallows new ones (they are accepted, what is sent on them is read and
// discarded, nothing is forwarded and nothing comes back), as a client sees
// across a real partition: a reset, then silence until its timeout. Heal
// forwards again and closes the swallowed connections, so that their clients
// reconnect. A Proxy is safe for concurrent use.
type Proxy struct {
	ln      net.Listener
	target  string
	latency time.Duration

	mu        sync.Mutex
	cut       bool
	closed    bool
	live      map[net.Conn]struct{} // both ends of every forwarded connection
	swallowed map[net.Conn]struct{} // connections accepted during a cut
	wg        sync.WaitGroup
}

// NewProxy starts a proxy to target ("host:port") that adds latency (>= 0)
// to each direction. It fails with an error wrapping ErrInvalid for an empty
// target or a negative latency, and with the listener's error if it cannot
// listen. Close stops it.
func NewProxy(target string, latency time.Duration) (*Proxy, error) {
	if target == "" {
		return nil, fmt.Errorf("%w: NewProxy: empty target", ErrInvalid)
	}
	if latency < 0 {
		return nil, fmt.Errorf("%w: NewProxy: latency must be >= 0, got %v", ErrInvalid, latency)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("multiregion: NewProxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, latency: latency, live: map[net.Conn]struct{}{}, swallowed: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients dial, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Latency returns the one-way latency the proxy adds.
func (p *Proxy) Latency() time.Duration { return p.latency }

// Cut starts a partition: connections in flight are closed, new ones are
// swallowed until Heal. Cutting a cut proxy does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.live {
		c.Close()
	}
}

// Heal ends a partition: new connections are forwarded again, and those
// swallowed during the cut are closed. Healing a proxy that is not cut does
// nothing.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.swallowed {
		c.Close()
	}
}

// Close stops listening, closes every connection and waits for the proxy's
// goroutines to end. A second call returns nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for c := range p.live {
		c.Close()
	}
	for c := range p.swallowed {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

// admit registers a connection just accepted: swallowed during a cut,
// live otherwise. It reports false, having closed c, after Close.
func (p *Proxy) admit(c net.Conn) (swallow bool, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		c.Close()
		return false, false
	case p.cut:
		p.swallowed[c] = struct{}{}
		return true, true
	}
	p.live[c] = struct{}{}
	return false, true
}

// addLive registers the proxy's own connection to the target. It reports
// false, having closed c, if the proxy was cut or closed meanwhile.
func (p *Proxy) addLive(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.cut {
		c.Close()
		return false
	}
	p.live[c] = struct{}{}
	return true
}

// untrack forgets c.
func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.live, c)
	delete(p.swallowed, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		swallow, ok := p.admit(c)
		if !ok {
			continue
		}
		p.wg.Add(1)
		if swallow {
			go p.swallow(c)
		} else {
			go p.forward(c)
		}
	}
}

// swallow reads and discards what c sends until it is closed (by Heal,
// Close or its client).
func (p *Proxy) swallow(c net.Conn) {
	defer p.wg.Done()
	io.Copy(io.Discard, c)
	c.Close()
	p.untrack(c)
}

// forward dials the target and pumps both directions through the delay.
func (p *Proxy) forward(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		client.Close()
		p.untrack(client)
		return
	}
	if !p.addLive(server) {
		client.Close()
		p.untrack(client)
		return
	}
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(server, client) }()
	go func() { defer pumps.Done(); p.pump(client, server) }()
	pumps.Wait()
	client.Close()
	server.Close()
	p.untrack(client)
	p.untrack(server)
}

// chunk is bytes read at some instant, due for writing latency later.
type chunk struct {
	data []byte
	due  time.Time
}

// pump copies src to dst, each chunk written latency after it was read.
// When src ends cleanly, dst's write side is closed once the last chunk is
// written (a half-close, as TCP would carry it); on an error both ends are
// closed, which stops the other direction too.
func (p *Proxy) pump(dst, src net.Conn) {
	queue := make(chan chunk, queueLen)
	done := make(chan struct{})
	go func() {
		defer close(done)
		failed := false
		for c := range queue {
			if failed {
				continue
			}
			if wait := time.Until(c.due); wait > 0 {
				time.Sleep(wait)
			}
			if _, err := dst.Write(c.data); err != nil {
				failed = true
				src.Close()
				dst.Close()
			}
		}
		if !failed {
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		}
	}()
	buf := make([]byte, chunkSize)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.latency)}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
				dst.Close()
			}
			break
		}
	}
	close(queue)
	<-done
}
