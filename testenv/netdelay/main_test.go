package main

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"testing"
	"time"
)

// startRelay runs one route with the given one-way delay to an echo server
// and returns the relay's address.
func startRelay(t *testing.T, oneWay time.Duration) string {
	t.Helper()
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{conns: map[net.Conn]struct{}{}, lns: []net.Listener{ln}}
	t.Cleanup(r.close)
	go r.serve(ln, route{listen: ln.Addr().String(), target: echo.Addr().String(), delay: oneWay})
	return ln.Addr().String()
}

// TestRoundTripDelay: a request/response pair through the relay takes at
// least twice the one-way delay.
func TestRoundTripDelay(t *testing.T) {
	const oneWay = 5 * time.Millisecond
	c, err := net.Dial("tcp", startRelay(t, oneWay))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 16)
	var fastest time.Duration = time.Hour
	for range 10 {
		start := time.Now()
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		fastest = min(fastest, time.Since(start))
	}
	if fastest < 2*oneWay {
		t.Errorf("fastest round trip %v, want at least %v", fastest, 2*oneWay)
	}
}

// TestBandwidthNotCutByDelay: 16 MiB written at once arrive intact, in far
// less time than one delay per chunk would take (256 chunks x 2 x 20ms =
// 10s when the relay waited for each chunk in turn).
func TestBandwidthNotCutByDelay(t *testing.T) {
	const oneWay = 20 * time.Millisecond
	c, err := net.Dial("tcp", startRelay(t, oneWay))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 16<<20)
	rand.Read(data)
	start := time.Now()
	go func() {
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if !bytes.Equal(got, data) {
		t.Fatalf("echo through the relay: %d bytes back, want the %d sent, unchanged", len(got), len(data))
	}
	if took < 2*oneWay || took > 3*time.Second {
		t.Errorf("16 MiB through the relay took %v, want between %v and 3s", took, 2*oneWay)
	}
}
