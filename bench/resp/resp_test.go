package resp

import (
	"bufio"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"
)

func startRedis(t *testing.T) *Client {
	t.Helper()
	s, err := StartServer()
	if errors.Is(err, ErrNoServer) {
		t.Skip("redis-server is not installed (apt-get install -y redis-server): skipping the tests against a real server")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c, err := Dial(s.Addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestSetNXAgainstRedis(t *testing.T) {
	c := startRedis(t)
	ttl := Seconds(90 * time.Minute)
	if string(ttl) != "5400" {
		t.Fatalf("ttl %q", ttl)
	}
	for i, tc := range []struct {
		key  string
		want bool
	}{{"a", true}, {"a", false}, {"b", true}, {"a", false}, {"b", false}, {"", true}, {"", false}} {
		got, err := c.SetNX([]byte(tc.key), ttl)
		if err != nil || got != tc.want {
			t.Fatalf("step %d: SetNX(%q) = %v, %v; want %v", i, tc.key, got, err, tc.want)
		}
	}
	rep, err := c.Do("TTL", "a")
	if err != nil || rep.Kind != ':' || rep.Int < 5390 || rep.Int > 5400 {
		t.Fatalf("TTL a = %+v, %v; want ~5400", rep, err)
	}
	rep, err = c.Do("GET", "b")
	if err != nil || rep.Str != "1" {
		t.Fatalf("GET b = %+v, %v", rep, err)
	}
	rep, err = c.Do("GET", "missing")
	if err != nil || !rep.Null {
		t.Fatalf("GET missing = %+v, %v", rep, err)
	}
	var se *ServerError
	if _, err := c.Do("NOSUCHCOMMAND"); !errors.As(err, &se) {
		t.Fatalf("unknown command: %v, want a ServerError", err)
	}
	if m, err := UsedMemory(c); err != nil || m <= 0 {
		t.Fatalf("UsedMemory = %d, %v", m, err)
	}
}

func TestPipelinedAgainstRedis(t *testing.T) {
	c := startRedis(t)
	var keys [][]byte
	for i := range 5_000 {
		keys = append(keys, []byte("k"+strconv.Itoa(i%3_000)))
	}
	set, err := c.SetNXPipelined(keys, Seconds(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range set {
		if ok != (i < 3_000) {
			t.Fatalf("key %d (%s): set=%v", i, keys[i], ok)
		}
	}
	rep, err := c.Do("DBSIZE")
	if err != nil || rep.Int != 3_000 {
		t.Fatalf("DBSIZE = %+v, %v", rep, err)
	}
	ttl := Seconds(time.Hour)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := c.SetNX(keys[0], ttl); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("SetNX allocates %v times", n)
	}
}

// TestMalformedReplies feeds the decoder what a broken server might send.
func TestMalformedReplies(t *testing.T) {
	for _, reply := range []string{":12x\r\n", "$5\r\nab\r\n", "?\r\n", "+OK\n", "$abc\r\n"} {
		srv, cli := net.Pipe()
		go func() {
			r := bufio.NewReader(srv)
			r.ReadString('\n') // the command's array header is enough
			srv.Write([]byte(reply))
			srv.Close()
		}()
		c := &Client{conn: cli, w: bufio.NewWriter(cli), r: bufio.NewReader(cli)}
		if rep, err := c.Do("GET", "x"); err == nil {
			t.Errorf("reply %q decoded as %+v", reply, rep)
		}
		cli.Close()
	}
	srv, cli := net.Pipe()
	go func() {
		bufio.NewReader(srv).ReadString('\n')
		srv.Write([]byte(":1\r\n"))
		srv.Close()
	}()
	c := &Client{conn: cli, w: bufio.NewWriter(cli), r: bufio.NewReader(cli)}
	if _, err := c.SetNX([]byte("x"), Seconds(time.Second)); err == nil {
		t.Error("SetNX accepted an integer reply")
	}
}
