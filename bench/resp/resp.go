// Package resp is a minimal Redis client for the benchmark's baseline: the
// per-message "SET key 1 NX EX window" that teams usually start with, one
// round trip per message. It speaks RESP2 over one TCP connection, reuses
// its buffers (a SetNX allocates nothing) and can pipeline a bulk load.
// It also starts a throw-away redis-server on loopback.
package resp

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// Client is one connection to a Redis server. It is not safe for concurrent
// use.
type Client struct {
	conn net.Conn
	w    *bufio.Writer
	r    *bufio.Reader
	num  []byte // scratch for decimal lengths
}

// Dial connects to addr (host:port).
func Dial(addr string, timeout time.Duration) (*Client, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("resp: dial %s: %w", addr, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	return &Client{conn: conn, w: bufio.NewWriterSize(conn, 64<<10), r: bufio.NewReaderSize(conn, 64<<10), num: make([]byte, 0, 20)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// ServerError is an error reply ("-ERR ...").
type ServerError struct{ Msg string }

func (e *ServerError) Error() string { return "resp: server: " + e.Msg }

// Reply is one decoded reply. Kind is the RESP type byte: '+' simple string,
// '-' error, ':' integer, '$' bulk string, '*' array (Elems).
type Reply struct {
	Kind  byte
	Str   string
	Int   int64
	Null  bool
	Elems []Reply
}

func (c *Client) writeBulk(b []byte) {
	c.w.WriteByte('$')
	c.num = strconv.AppendInt(c.num[:0], int64(len(b)), 10)
	c.w.Write(c.num)
	c.w.WriteString("\r\n")
	c.w.Write(b)
	c.w.WriteString("\r\n")
}

func (c *Client) writeBulkString(s string) {
	c.w.WriteByte('$')
	c.num = strconv.AppendInt(c.num[:0], int64(len(s)), 10)
	c.w.Write(c.num)
	c.w.WriteString("\r\n")
	c.w.WriteString(s)
	c.w.WriteString("\r\n")
}

// writeSetNX buffers "SET key 1 NX EX ttl".
func (c *Client) writeSetNX(key []byte, ttl []byte) {
	c.w.WriteString("*6\r\n$3\r\nSET\r\n")
	c.writeBulk(key)
	c.w.WriteString("$1\r\n1\r\n$2\r\nNX\r\n$2\r\nEX\r\n")
	c.writeBulk(ttl)
}

// line reads one reply line without its CRLF; it aliases the read buffer.
func (c *Client) line() ([]byte, error) {
	l, err := c.r.ReadSlice('\n')
	if err != nil {
		return nil, fmt.Errorf("resp: read reply: %w", err)
	}
	if len(l) < 3 || l[len(l)-2] != '\r' {
		return nil, fmt.Errorf("resp: malformed reply line %q", l)
	}
	return l[:len(l)-2], nil
}

// readSetNX reads the reply of a SET NX: +OK (set) or a null bulk (the key
// existed).
func (c *Client) readSetNX() (bool, error) {
	l, err := c.line()
	if err != nil {
		return false, err
	}
	switch {
	case len(l) == 3 && l[0] == '+' && l[1] == 'O' && l[2] == 'K':
		return true, nil
	case len(l) == 3 && l[0] == '$' && l[1] == '-' && l[2] == '1':
		return false, nil
	case l[0] == '-':
		return false, &ServerError{Msg: string(l[1:])}
	}
	return false, fmt.Errorf("resp: unexpected reply to SET NX: %q", l)
}

// TTL is a SET NX expiry in seconds, encoded once.
type TTL []byte

// Seconds makes the TTL of d, rounded up to whole seconds (at least 1).
func Seconds(d time.Duration) TTL {
	s := max(int64((d+time.Second-1)/time.Second), 1)
	return TTL(strconv.AppendInt(nil, s, 10))
}

// SetNX sends "SET key 1 NX EX ttl" and waits for the answer: true when the
// key was new (and is now set), false when it existed. One round trip.
func (c *Client) SetNX(key []byte, ttl TTL) (bool, error) {
	c.writeSetNX(key, ttl)
	if err := c.w.Flush(); err != nil {
		return false, fmt.Errorf("resp: write: %w", err)
	}
	return c.readSetNX()
}

// SetNXPipelined sends "SET key 1 NX EX ttl" for every key in one write and
// reads all answers; set[i] reports whether keys[i] was new. It is for bulk
// loads, not the per-message baseline.
func (c *Client) SetNXPipelined(keys [][]byte, ttl TTL, set []bool) ([]bool, error) {
	for _, k := range keys {
		c.writeSetNX(k, ttl)
	}
	if err := c.w.Flush(); err != nil {
		return set, fmt.Errorf("resp: write: %w", err)
	}
	for range keys {
		ok, err := c.readSetNX()
		if err != nil {
			return set, err
		}
		set = append(set, ok)
	}
	return set, nil
}

// Do sends one command and reads its reply. An error reply is returned as a
// *ServerError.
func (c *Client) Do(args ...string) (Reply, error) {
	c.w.WriteByte('*')
	c.num = strconv.AppendInt(c.num[:0], int64(len(args)), 10)
	c.w.Write(c.num)
	c.w.WriteString("\r\n")
	for _, a := range args {
		c.writeBulkString(a)
	}
	if err := c.w.Flush(); err != nil {
		return Reply{}, fmt.Errorf("resp: write: %w", err)
	}
	rep, err := c.read(0)
	if err == nil && rep.Kind == '-' {
		err = &ServerError{Msg: rep.Str}
	}
	return rep, err
}

// read decodes one reply of any RESP2 type.
func (c *Client) read(depth int) (Reply, error) {
	if depth > 8 {
		return Reply{}, errors.New("resp: reply nested too deep")
	}
	l, err := c.line()
	if err != nil {
		return Reply{}, err
	}
	rep := Reply{Kind: l[0]}
	switch l[0] {
	case '+', '-':
		rep.Str = string(l[1:])
	case ':':
		if rep.Int, err = strconv.ParseInt(string(l[1:]), 10, 64); err != nil {
			return rep, fmt.Errorf("resp: bad integer reply %q", l)
		}
	case '$':
		n, err := strconv.Atoi(string(l[1:]))
		if err != nil || n < -1 {
			return rep, fmt.Errorf("resp: bad bulk length %q", l)
		}
		if n == -1 {
			rep.Null = true
			return rep, nil
		}
		buf := make([]byte, n+2)
		if _, err := readFull(c.r, buf); err != nil {
			return rep, fmt.Errorf("resp: read bulk: %w", err)
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return rep, errors.New("resp: bulk string not ended by CRLF")
		}
		rep.Str = string(buf[:n])
	case '*':
		n, err := strconv.Atoi(string(l[1:]))
		if err != nil || n < -1 {
			return rep, fmt.Errorf("resp: bad array length %q", l)
		}
		if n == -1 {
			rep.Null = true
			return rep, nil
		}
		for range n {
			e, err := c.read(depth + 1)
			if err != nil {
				return rep, err
			}
			rep.Elems = append(rep.Elems, e)
		}
	default:
		return rep, fmt.Errorf("resp: unknown reply type %q", l)
	}
	return rep, nil
}

func readFull(r *bufio.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
