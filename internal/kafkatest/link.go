package kafkatest

import (
	"context"
	"net"
	"os"
	"sync"
	"time"
)

// Link is a network between a client and the brokers that can be cut: while
// cut, no byte moves in either direction and no connection opens, as when
// a link goes down and packets are dropped without a reset. Reads and writes
// wait until the link heals or their deadline passes (then they fail with a
// timeout, as TCP would for the job); bytes a broker had already sent are
// held back, not delivered, until the heal.
type Link struct {
	mu     sync.Mutex
	healed chan struct{} // closed while the link is up
}

// NewLink returns a link that is up. Give Dial to a kafka-go Transport.
func NewLink() *Link {
	n := &Link{healed: make(chan struct{})}
	close(n.healed)
	return n
}

// Cut takes the link down.
func (n *Link) Cut() {
	n.mu.Lock()
	select {
	case <-n.healed:
		n.healed = make(chan struct{})
	default: // already cut
	}
	n.mu.Unlock()
}

// Heal brings the link up again; held bytes move on.
func (n *Link) Heal() {
	n.mu.Lock()
	select {
	case <-n.healed: // already up
	default:
		close(n.healed)
	}
	n.mu.Unlock()
}

// wait returns nil once the link is up, or an error when deadline passes or
// ctx ends first.
func (n *Link) wait(ctx context.Context, deadline time.Time) error {
	n.mu.Lock()
	healed := n.healed
	n.mu.Unlock()
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-healed:
		return nil
	case <-timeout:
		return os.ErrDeadlineExceeded
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Dial opens a connection through the link (kafka.Transport.Dial).
func (n *Link) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := n.wait(ctx, time.Time{}); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, n: n}, nil
}

type cutConn struct {
	net.Conn
	n      *Link
	mu     sync.Mutex
	rd, wd time.Time
}

func (c *cutConn) deadlines() (time.Time, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rd, c.wd
}

func (c *cutConn) Read(b []byte) (int, error) {
	rd, _ := c.deadlines()
	if err := c.n.wait(context.Background(), rd); err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: err}
	}
	k, err := c.Conn.Read(b)
	// Bytes that arrived while the link went down are held back.
	if werr := c.n.wait(context.Background(), rd); werr != nil {
		c.Conn.Close() // they can never be delivered in order now
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: werr}
	}
	return k, err
}

func (c *cutConn) Write(b []byte) (int, error) {
	_, wd := c.deadlines()
	if err := c.n.wait(context.Background(), wd); err != nil {
		return 0, &net.OpError{Op: "write", Net: "tcp", Err: err}
	}
	return c.Conn.Write(b)
}

func (c *cutConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rd, c.wd = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

func (c *cutConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rd = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *cutConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wd = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}
