// Command netdelay is the network delay of testenv/kafka.sh's netns mode: a
// TCP relay that holds every byte for a fixed one-way delay in each
// direction before passing it on, so a client that talks to the brokers
// through it sees a round trip of twice that delay, whatever its request
// pattern.
//
//	netdelay -route 10.140.160.1:36021=10.140.160.2:36021@500us [-route ...]
//
// Each -route is LISTEN=TARGET@ONEWAY: connections accepted on LISTEN are
// relayed to TARGET, each direction delayed by ONEWAY (0 relays without
// delay, so a route with and a route without the delay cost the same user
// space hop and differ only by the delay).
//
// The delay is per chunk read, not per connection turn: bytes read at time t
// are written at t+ONEWAY while later bytes are already being read, so the
// bandwidth is not cut by the delay (up to maxInFlight bytes per direction
// and connection wait to be written, about 16 MiB).
//
// Why not tc netem: the kernel this runs on is often built without
// sch_netem (and without sch_fq, which an eBPF departure-time delay would
// need); kafka.sh uses this relay when netem is missing. A relay measures
// the same thing for a client (every request waits a round trip) but not for
// the brokers' replication, which stays inside the namespace.
//
// It stops on SIGTERM or SIGINT, closing every listener and connection.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// chunkSize is the largest read relayed as one delayed unit; maxInFlight is
// how many chunks per direction wait for their time.
const (
	chunkSize   = 64 << 10
	maxInFlight = 256
)

type route struct {
	listen, target string
	delay          time.Duration
}

type routes []route

func (r *routes) String() string { return fmt.Sprint(*r) }

func (r *routes) Set(s string) error {
	lt, d, ok := strings.Cut(s, "@")
	if !ok {
		return fmt.Errorf("route %q: want LISTEN=TARGET@ONEWAY", s)
	}
	l, t, ok := strings.Cut(lt, "=")
	if !ok || l == "" || t == "" {
		return fmt.Errorf("route %q: want LISTEN=TARGET@ONEWAY", s)
	}
	delay, err := time.ParseDuration(d)
	if err != nil || delay < 0 {
		return fmt.Errorf("route %q: one-way delay %q: want a duration >= 0 such as 500us", s, d)
	}
	*r = append(*r, route{listen: l, target: t, delay: delay})
	return nil
}

func main() {
	var rs routes
	flag.Var(&rs, "route", "LISTEN=TARGET@ONEWAY, repeatable")
	flag.Parse()
	if len(rs) == 0 {
		fmt.Fprintln(os.Stderr, "netdelay: at least one -route LISTEN=TARGET@ONEWAY is needed")
		os.Exit(2)
	}
	r := &relay{conns: map[net.Conn]struct{}{}}
	for _, rt := range rs {
		ln, err := net.Listen("tcp", rt.listen)
		if err != nil {
			r.close()
			log.Fatalf("netdelay: %v", err)
		}
		r.lns = append(r.lns, ln)
		go r.serve(ln, rt)
	}
	log.Printf("netdelay: %d routes up", len(rs))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	r.close()
}

type relay struct {
	mu    sync.Mutex
	lns   []net.Listener
	conns map[net.Conn]struct{}
	done  bool
}

func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

func (r *relay) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = true
	for _, ln := range r.lns {
		ln.Close()
	}
	for c := range r.conns {
		c.Close()
	}
}

func (r *relay) serve(ln net.Listener, rt route) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Printf("netdelay: accept on %s: %v", rt.listen, err)
			}
			return
		}
		go r.pair(c, rt)
	}
}

// pair relays one client connection to the target and back.
func (r *relay) pair(client net.Conn, rt route) {
	server, err := net.DialTimeout("tcp", rt.target, 10*time.Second)
	if err != nil {
		log.Printf("netdelay: %s -> %s: %v", rt.listen, rt.target, err)
		client.Close()
		return
	}
	if !r.track(client) || !r.track(server) {
		client.Close()
		server.Close()
		return
	}
	for _, c := range []net.Conn{client, server} {
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pump(server, client, rt.delay) }()
	go func() { defer wg.Done(); pump(client, server, rt.delay) }()
	wg.Wait()
	r.untrack(client)
	r.untrack(server)
}

type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst, writing each chunk delay after it was read. When
// src ends it half-closes dst after the last chunk; when dst fails it closes
// src so the other direction ends too.
func pump(dst, src net.Conn, delay time.Duration) {
	q := make(chan chunk, maxInFlight)
	free := make(chan []byte, maxInFlight+1)
	go func() {
		defer close(q)
		for {
			var b []byte
			select {
			case b = <-free:
			default:
				b = make([]byte, chunkSize)
			}
			n, err := src.Read(b[:chunkSize])
			if n > 0 {
				q <- chunk{b: b[:n], due: time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range q {
		if failed {
			continue
		}
		if wait := time.Until(c.due); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			src.Close()
			continue
		}
		select {
		case free <- c.b[:cap(c.b)]:
		default:
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok && !failed {
		tc.CloseWrite()
	} else {
		dst.Close()
	}
}
