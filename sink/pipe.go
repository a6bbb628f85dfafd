package sink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/saslauthenticate"
	"github.com/segmentio/kafka-go/protocol/saslhandshake"
	"github.com/segmentio/kafka-go/sasl"
)

// A pipe is the producer's own connection to one broker for its produce
// requests: requests are written back to back, in the order they are sent,
// without waiting for answers, and the answers are read in that order by
// one goroutine and matched by correlation id. A broker handles the
// requests of a connection one at a time and in order, so the batches of a
// window reach the log in sequence order: nothing overtakes its
// predecessor, as it does when each request in flight takes a connection
// of its own (kafka-go's Transport serves one request per connection at a
// time).
//
// Any failure breaks the whole pipe: a lost connection, an answer not read
// by its request's deadline (the deadline of the oldest request out), an
// answer out of order, or the caller giving up (its context ended). Every
// request still out then fails with the pipe's error, and its outcome is
// unknown; the next request dials a new pipe. That is the only way to
// drop an answer from a stream read in order.

// Dialer opens the producer's produce connections. Its fields mean what
// kafka.Transport's fields of the same names mean; DialerFor copies them
// from the job's Transport so that both secure their connections the same
// way.
type Dialer struct {
	// ClientID is sent with every request.
	ClientID string
	// Timeout bounds connecting: TCP, TLS handshake, ApiVersions and SASL.
	// The default value is 10s.
	Timeout time.Duration
	// TLS, when set, wraps each connection in TLS; an empty ServerName is
	// set to the broker's host.
	TLS *tls.Config
	// SASL, when set, authenticates each connection (SaslHandshake, then
	// SaslAuthenticate until the mechanism completes).
	SASL sasl.Mechanism
	// Dial opens the TCP connection. The default value is a net.Dialer.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// DialerFor returns a Dialer that connects like t: the same client id,
// dial timeout, dial function, TLS and SASL.
func DialerFor(t *kafka.Transport) *Dialer {
	return &Dialer{ClientID: t.ClientID, Timeout: t.DialTimeout, TLS: t.TLS, SASL: t.SASL, Dial: t.Dial}
}

// pipeMaxIdle is how long a pipe may stay without a request before it is
// replaced by a new one instead of used: brokers close connections idle
// for connections.max.idle.ms (10 minutes by default), and a request
// written into a connection the broker already closed would end with an
// unknown outcome.
const pipeMaxIdle = time.Minute

// pipeGrace is how long an answer whose deadline passed is waited for
// once more before the pipe breaks: a process that stood still (stopped,
// or its machine paused) past a deadline finds the answers that arrived
// meanwhile in its socket buffer, and must not call them lost.
const pipeGrace = 100 * time.Millisecond

// RequestWatch is told of the requests a producer sends on its own
// connections (Config.Watch). Every RequestSent is followed by exactly one
// RequestDone, from any goroutine: err is nil when the broker answered (an
// answer carrying an error code is an answer), wraps context.Canceled when
// the producer gave up on the request (its context ended, or Close), and
// is any other error when the request failed without an answer (the
// connection could not be made, broke, or the answer did not come in
// time).
type RequestWatch interface {
	RequestSent()
	RequestDone(err error)
}

type pipe struct {
	broker   int32
	nc       net.Conn
	br       *protocol.Conn // reads nc, buffered
	clientID string
	version  int16 // of Produce, negotiated

	wmu sync.Mutex // orders writes with their place in queue

	mu    sync.Mutex
	cond  sync.Cond // queue got a call, or err was set
	queue []*pipeCall
	err   error // set once: the pipe is broken
	id    int32 // last correlation id
	last  time.Time

	watch RequestWatch // nil: none; set before the first send
}

// pipeCall is one request on a pipe: done is closed once res or err is set.
type pipeCall struct {
	id       int32
	deadline time.Time
	done     chan struct{}
	res      protocol.Message
	err      error
}

// dialPipe connects to broker at address and negotiates the Produce
// version (and authenticates) before returning.
func (d *Dialer) dialPipe(ctx context.Context, broker int32, address string) (*pipe, error) {
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dial := d.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	nc, err := dial(ctx, "tcp", address)
	if err != nil {
		return nil, fmt.Errorf("sink: produce connection to broker %d (%s): %w", broker, address, err)
	}
	p, err := d.setup(ctx, nc, broker, address)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("sink: produce connection to broker %d (%s): %w", broker, address, err)
	}
	go p.read()
	return p, nil
}

func (d *Dialer) setup(ctx context.Context, nc net.Conn, broker int32, address string) (*pipe, error) {
	host, port, _ := net.SplitHostPort(address)
	if d.TLS != nil {
		cfg := d.TLS
		if cfg.ServerName == "" {
			cfg = cfg.Clone()
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return nil, err
		}
		nc = tc
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	pc := protocol.NewConn(nc, d.ClientID)
	res, err := pc.RoundTrip(new(apiversions.Request))
	if err != nil {
		return nil, fmt.Errorf("api versions: %w", err)
	}
	av := res.(*apiversions.Response)
	if av.ErrorCode != 0 {
		return nil, fmt.Errorf("api versions: %w", kafka.Error(av.ErrorCode))
	}
	versions := make(map[protocol.ApiKey]int16, len(av.ApiKeys))
	for _, k := range av.ApiKeys {
		key := protocol.ApiKey(k.ApiKey)
		versions[key] = key.SelectVersion(k.MinVersion, k.MaxVersion)
	}
	version, ok := versions[protocol.Produce]
	if !ok {
		return nil, errors.New("api versions: the broker does not accept produce requests")
	}
	pc.SetVersions(versions)
	if d.SASL != nil {
		portN, _ := strconv.Atoi(port)
		mctx := sasl.WithMetadata(ctx, &sasl.Metadata{Host: host, Port: portN})
		if err := authenticate(mctx, pc, d.SASL); err != nil {
			return nil, err
		}
	}
	nc.SetDeadline(time.Time{})
	p := &pipe{broker: broker, nc: nc, br: pc, clientID: d.ClientID,
		version: version, last: time.Now()}
	p.cond.L = &p.mu
	return p, nil
}

// authenticate runs the SASL exchange of m on pc.
func authenticate(ctx context.Context, pc *protocol.Conn, m sasl.Mechanism) error {
	res, err := pc.RoundTrip(&saslhandshake.Request{Mechanism: m.Name()})
	if err != nil {
		return fmt.Errorf("sasl handshake: %w", err)
	}
	if code := res.(*saslhandshake.Response).ErrorCode; code != 0 {
		return fmt.Errorf("sasl handshake: %w", kafka.Error(code))
	}
	sess, state, err := m.Start(ctx)
	if err != nil {
		return fmt.Errorf("sasl %s: %w", m.Name(), err)
	}
	for done := false; !done; {
		res, err := pc.RoundTrip(&saslauthenticate.Request{AuthBytes: state})
		if errors.Is(err, io.EOF) {
			// Brokers may end a failed exchange by closing the connection.
			return kafka.SASLAuthenticationFailed
		}
		if err != nil {
			return fmt.Errorf("sasl authenticate: %w", err)
		}
		r := res.(*saslauthenticate.Response)
		if r.ErrorCode != 0 {
			return fmt.Errorf("sasl authenticate: %w", kafka.Error(r.ErrorCode))
		}
		if done, state, err = sess.Next(ctx, r.AuthBytes); err != nil {
			return fmt.Errorf("sasl %s: %w", m.Name(), err)
		}
	}
	return nil
}

// send writes msg behind the requests already out and returns its call
// without waiting for the answer, which must come within timeout. An
// error means the pipe is broken (and every call out fails with it).
func (p *pipe) send(msg protocol.Message, timeout time.Duration) (*pipeCall, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return nil, p.err
	}
	if p.watch != nil {
		p.watch.RequestSent()
	}
	p.id++
	c := &pipeCall{id: p.id, deadline: time.Now().Add(timeout), done: make(chan struct{})}
	p.queue = append(p.queue, c)
	p.last = time.Now()
	p.cond.Signal()
	p.mu.Unlock()
	// Only the producer's goroutine sends, so nothing waits on wmu; the
	// reader never takes it.
	p.nc.SetWriteDeadline(c.deadline)
	if err := protocol.WriteRequest(p.nc, p.version, c.id, p.clientID, msg); err != nil {
		p.fail(err)
		return nil, p.broken()
	}
	return c, nil
}

// wait returns c's answer; when ctx ends first, it breaks the pipe (the
// answer can no longer be skipped) and returns the resulting error.
func (p *pipe) wait(ctx context.Context, c *pipeCall) (protocol.Message, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		p.fail(ctx.Err())
		<-c.done
	}
	return c.res, c.err
}

// read reads the answers, in send order, until the pipe breaks.
func (p *pipe) read() {
	for {
		p.mu.Lock()
		for len(p.queue) == 0 && p.err == nil {
			p.cond.Wait()
		}
		if p.err != nil {
			p.mu.Unlock()
			return
		}
		c := p.queue[0]
		p.mu.Unlock()
		p.nc.SetReadDeadline(c.deadline)
		_, err := p.br.Peek(4) // consumes nothing
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.nc.SetReadDeadline(time.Now().Add(pipeGrace))
			_, err = p.br.Peek(4)
		}
		var id int32
		var res protocol.Message
		if err == nil {
			id, res, err = protocol.ReadResponse(p.br, protocol.Produce, p.version)
		}
		if err == nil && id != c.id {
			err = fmt.Errorf("answer with correlation id %d, want %d", id, c.id)
		}
		if err != nil {
			p.fail(err)
			return
		}
		p.mu.Lock()
		if p.err != nil { // failed meanwhile: c was settled with the error
			p.mu.Unlock()
			return
		}
		p.queue[0] = nil
		p.queue = p.queue[1:]
		p.last = time.Now()
		p.mu.Unlock()
		if p.watch != nil {
			p.watch.RequestDone(nil)
		}
		c.res = res
		close(c.done)
	}
}

// fail breaks the pipe with cause: the connection is closed and every call
// out ends with the error.
func (p *pipe) fail(cause error) { p.failWith(cause, false) }

// failWith is fail; gaveUp says the producer itself ended the requests out
// (Close), which its RequestWatch hears as context.Canceled.
func (p *pipe) failWith(cause error, gaveUp bool) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = &pipeError{broker: p.broker, err: cause}
	q := p.queue
	p.queue = nil
	p.cond.Broadcast()
	p.mu.Unlock()
	p.nc.Close()
	var werr error = p.err
	if gaveUp {
		werr = context.Canceled
	}
	for _, c := range q {
		if p.watch != nil {
			p.watch.RequestDone(werr)
		}
		c.err = p.err
		close(c.done)
	}
}

// broken returns the pipe's error, nil while it works.
func (p *pipe) broken() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// usable reports whether a new request may go on p: it works and, when
// nothing is out, was not idle for too long.
func (p *pipe) usable(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err == nil && (len(p.queue) > 0 || now.Sub(p.last) < pipeMaxIdle)
}

func (p *pipe) close() { p.failWith(net.ErrClosed, true) }

// pipeError is the error of a broken pipe: every request that was out on
// it has an unknown outcome.
type pipeError struct {
	broker int32
	err    error
}

func (e *pipeError) Error() string {
	return fmt.Sprintf("sink: produce connection to broker %d lost: %v", e.broker, e.err)
}

func (e *pipeError) Unwrap() error { return e.err }
