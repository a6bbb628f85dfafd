package chaos

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"sync"
	"sync/atomic"
)

// Loss is what a Proxy does with one response.
type Loss int

const (
	// Deliver passes the response on.
	Deliver Loss = iota
	// LoseAndClose drops the response and closes both connections: the
	// broker applied the request, the client sees the connection break
	// (a broker crash or a reset after the write).
	LoseAndClose
	// LoseAndStall drops the response and everything after it on that
	// connection while keeping it open: the client waits until its own
	// request timeout (a network partition that swallows packets).
	LoseAndStall
)

// Decide chooses the fate of a response to a request with api key apiKey.
// It is called from several goroutines.
type Decide func(apiKey int16) Loss

// Proxy listens on a loopback port and forwards every connection to one
// broker. It reads the Kafka framing in both directions (a 4-byte big-endian
// size before each message; a request starts with api key, api version and
// correlation id, a response with the correlation id), remembers the api key
// of each outstanding correlation id, and asks Decide about every response.
type Proxy struct {
	ln     net.Listener
	target string
	decide Decide

	// Lost counts responses dropped, per api key; behind those of them
	// with another request of the same api key still out on the
	// connection (a produce window pipelined on one connection).
	mu     sync.Mutex
	lost   map[int16]int
	behind map[int16]int
	conns  map[net.Conn]struct{}
	done   atomic.Bool
	wg     sync.WaitGroup
}

// NewProxy starts a proxy in front of the broker at target.
func NewProxy(target string, decide Decide) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, decide: decide, lost: map[int16]int{}, behind: map[int16]int{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Lost returns how many responses were dropped for each api key.
func (p *Proxy) Lost() map[int16]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.lost)
}

// Close stops accepting, closes every open connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	p.done.Store(true)
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn, add bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add {
		p.conns[c] = struct{}{}
	} else {
		delete(p.conns, c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		broker, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.track(client, true)
		p.track(broker, true)
		if p.done.Load() { // Close ran between Accept and track
			client.Close()
			broker.Close()
		}
		p.wg.Add(1)
		go p.serve(client, broker)
	}
}

// serve forwards one connection until either side closes it.
func (p *Proxy) serve(client, broker net.Conn) {
	defer p.wg.Done()
	defer p.track(client, false)
	defer p.track(broker, false)
	var (
		mu      sync.Mutex
		pending = map[int32]int16{} // correlation id -> api key
	)
	upDone := make(chan struct{})
	go func() { // client -> broker: note each request's api key
		defer close(upDone)
		defer broker.Close()
		forwardFrames(client, broker, func(msg []byte) bool {
			if len(msg) >= 8 {
				mu.Lock()
				pending[int32(binary.BigEndian.Uint32(msg[4:8]))] = int16(binary.BigEndian.Uint16(msg[0:2]))
				mu.Unlock()
			}
			return true
		})
	}()
	stalled := false
	forwardFrames(broker, client, func(msg []byte) bool {
		if stalled {
			return false
		}
		if len(msg) < 4 {
			return true
		}
		corr := int32(binary.BigEndian.Uint32(msg[0:4]))
		mu.Lock()
		key, ok := pending[corr]
		delete(pending, corr)
		others := 0
		for _, k := range pending {
			if k == key {
				others++
			}
		}
		mu.Unlock()
		if !ok {
			return true
		}
		switch p.decide(key) {
		case LoseAndClose:
			p.count(key, others)
			client.Close()
			broker.Close()
			return false
		case LoseAndStall:
			p.count(key, others)
			stalled = true
			return false
		}
		return true
	})
	// The broker side ended; a stalled client keeps its connection until
	// it gives up itself, like a client behind a black hole.
	if !stalled {
		client.Close()
	}
	<-upDone
	client.Close()
}

func (p *Proxy) count(key int16, others int) {
	p.mu.Lock()
	p.lost[key]++
	if others > 0 {
		p.behind[key]++
	}
	p.mu.Unlock()
}

// LostBehind returns, per api key, how many dropped responses had another
// request of the same key still out on their connection.
func (p *Proxy) LostBehind() map[int16]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.behind)
}

// forwardFrames copies size-prefixed messages from src to dst while pass
// returns true for them (a message it rejects is dropped) until src ends.
func forwardFrames(src io.Reader, dst io.Writer, pass func(msg []byte) bool) {
	var size [4]byte
	buf := make([]byte, 0, 64<<10)
	for {
		if _, err := io.ReadFull(src, size[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(size[:])
		if n > 256<<20 {
			return // not Kafka framing
		}
		if cap(buf) < int(n)+4 {
			buf = make([]byte, int(n)+4)
		}
		buf = buf[:int(n)+4]
		copy(buf, size[:])
		if _, err := io.ReadFull(src, buf[4:]); err != nil {
			return
		}
		if !pass(buf[4:]) {
			continue
		}
		if _, err := dst.Write(buf); err != nil {
			return
		}
	}
}

// Proxies is one Proxy per broker, addressed by the broker's own address
// (the one its metadata advertises).
type Proxies map[string]*Proxy

// StartProxies starts a proxy in front of each broker.
func StartProxies(brokers []string, decide Decide) (Proxies, error) {
	ps := Proxies{}
	for _, b := range brokers {
		p, err := NewProxy(b, decide)
		if err != nil {
			ps.Close()
			return nil, err
		}
		ps[b] = p
	}
	return ps, nil
}

// Route maps a broker address to its proxy's address, for a kafka-go
// Transport's Dial; an address without a proxy is an error, so that no
// connection bypasses the faults.
func (ps Proxies) Route(addr string) (string, error) {
	p, ok := ps[addr]
	if !ok {
		return "", fmt.Errorf("chaos: no proxy for broker %s", addr)
	}
	return p.Addr(), nil
}

// Lost sums the dropped responses per api key over all proxies.
func (ps Proxies) Lost() map[int16]int {
	sum := map[int16]int{}
	for _, p := range ps {
		for k, v := range p.Lost() {
			sum[k] += v
		}
	}
	return sum
}

// LostBehind sums Proxy.LostBehind over all proxies.
func (ps Proxies) LostBehind() map[int16]int {
	sum := map[int16]int{}
	for _, p := range ps {
		for k, v := range p.LostBehind() {
			sum[k] += v
		}
	}
	return sum
}

// Close closes every proxy.
func (ps Proxies) Close() error {
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}
