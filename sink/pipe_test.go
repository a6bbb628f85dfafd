package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/apiversions"
	"github.com/segmentio/kafka-go/protocol/produce"
)

// frame is one request as a scripted broker reads it.
type frame struct {
	key, version int16
	corr         int32
}

// scriptedBroker accepts one connection, answers ApiVersions (Produce
// v3-v8), then hands every further request frame to serve, which answers
// (or not) with the helpers of the returned connection.
func scriptedBroker(t *testing.T, serve func(c net.Conn, next func() (frame, bool))) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		next := func() (frame, bool) {
			var size [4]byte
			if _, err := io.ReadFull(c, size[:]); err != nil {
				return frame{}, false
			}
			body := make([]byte, binary.BigEndian.Uint32(size[:]))
			if _, err := io.ReadFull(c, body); err != nil {
				return frame{}, false
			}
			return frame{int16(binary.BigEndian.Uint16(body[0:2])), int16(binary.BigEndian.Uint16(body[2:4])),
				int32(binary.BigEndian.Uint32(body[4:8]))}, true
		}
		f, ok := next()
		if !ok || f.key != int16(protocol.ApiVersions) {
			return
		}
		protocol.WriteResponse(c, f.version, f.corr, &apiversions.Response{ApiKeys: []apiversions.ApiKeyResponse{
			{ApiKey: int16(protocol.ApiVersions), MinVersion: 0, MaxVersion: 2},
			{ApiKey: int16(protocol.Produce), MinVersion: 3, MaxVersion: 8},
		}})
		serve(c, next)
	}()
	return ln.Addr().String()
}

func answer(c net.Conn, f frame, base int64) {
	protocol.WriteResponse(c, f.version, f.corr, &produce.Response{Topics: []produce.ResponseTopic{{
		Topic: "t", Partitions: []produce.ResponsePartition{{Partition: 0, BaseOffset: base}}}}})
}

func pipeRequest(p *Producer) protocol.Message {
	return p.produceRequest(topicPartition{"t", 0}, []byte{0, 0, 0, 0})
}

// TestPipeWritesAheadAndMatchesAnswers: three requests reach the broker
// before it answers any (the pipe does not wait), and each call gets its
// own answer, in order.
func TestPipeWritesAheadAndMatchesAnswers(t *testing.T) {
	addr := scriptedBroker(t, func(c net.Conn, next func() (frame, bool)) {
		var fs []frame
		for range 3 {
			f, ok := next()
			if !ok {
				return
			}
			fs = append(fs, f)
		}
		for i, f := range fs {
			answer(c, f, int64(100*(i+1)))
		}
		next() // until the client closes
	})
	p := &Producer{cfg: Config{TransactionalID: "x", RequestTimeout: 5 * time.Second}}
	pp, err := (&Dialer{Timeout: 5 * time.Second}).dialPipe(context.Background(), 1, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pp.close()
	var calls []*pipeCall
	for range 3 {
		c, err := pp.send(pipeRequest(p), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, c)
	}
	for i, c := range calls {
		res, err := pp.wait(context.Background(), c)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if base := res.(*produce.Response).Topics[0].Partitions[0].BaseOffset; base != int64(100*(i+1)) {
			t.Errorf("call %d got the answer with base offset %d, want %d", i, base, 100*(i+1))
		}
	}
}

// TestPipeBreaks: an answer out of order, a missing answer (timeout) and a
// connection cut each fail every call out with a *pipeError (an unknown
// outcome), and the pipe takes no more requests.
func TestPipeBreaks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(c net.Conn, next func() (frame, bool))
	}{{
		name: "answer-out-of-order",
		serve: func(c net.Conn, next func() (frame, bool)) {
			f1, _ := next()
			f2, _ := next()
			answer(c, f2, 2)
			answer(c, f1, 1)
			next()
		},
	}, {
		name: "no-answer",
		serve: func(c net.Conn, next func() (frame, bool)) {
			next()
			next()
			next()
		},
	}, {
		name: "connection-cut",
		serve: func(c net.Conn, next func() (frame, bool)) {
			next()
			next()
			c.Close()
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := scriptedBroker(t, tc.serve)
			p := &Producer{cfg: Config{TransactionalID: "x"}}
			pp, err := (&Dialer{Timeout: 5 * time.Second}).dialPipe(context.Background(), 1, addr)
			if err != nil {
				t.Fatal(err)
			}
			defer pp.close()
			c1, err1 := pp.send(pipeRequest(p), 300*time.Millisecond)
			c2, err2 := pp.send(pipeRequest(p), 300*time.Millisecond)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			for i, c := range []*pipeCall{c1, c2} {
				_, err := pp.wait(context.Background(), c)
				var pe *pipeError
				if !errors.As(err, &pe) {
					t.Errorf("call %d: got %v, want a *pipeError", i+1, err)
				}
				if o := produceOutcome(nil, err, topicPartition{"t", 0}); !o.unknown {
					t.Errorf("call %d: outcome %+v, want unknown", i+1, o)
				}
			}
			if _, err := pp.send(pipeRequest(p), time.Second); err == nil || pp.usable(time.Now()) {
				t.Errorf("a broken pipe took a request (err %v, usable %v)", err, pp.usable(time.Now()))
			}
		})
	}
}

// TestPipeGraceAfterDeadline: an answer that is there just after its
// deadline (as after the process stood still past it) is read, not called
// lost.
func TestPipeGraceAfterDeadline(t *testing.T) {
	addr := scriptedBroker(t, func(c net.Conn, next func() (frame, bool)) {
		f, ok := next()
		if !ok {
			return
		}
		time.Sleep(40 * time.Millisecond)
		answer(c, f, 7)
		next()
	})
	p := &Producer{cfg: Config{TransactionalID: "x"}}
	pp, err := (&Dialer{Timeout: 5 * time.Second}).dialPipe(context.Background(), 1, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pp.close()
	c, err := pp.send(pipeRequest(p), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	res, err := pp.wait(context.Background(), c)
	if err != nil {
		t.Fatalf("answer 30 ms past the deadline, within the %v grace: %v", pipeGrace, err)
	}
	if base := res.(*produce.Response).Topics[0].Partitions[0].BaseOffset; base != 7 {
		t.Errorf("base offset %d, want 7", base)
	}
}

// watchLog is a RequestWatch that writes down what it is told.
type watchLog struct {
	mu     sync.Mutex
	events []string
}

func (w *watchLog) RequestSent() { w.add("sent") }
func (w *watchLog) RequestDone(err error) {
	switch {
	case err == nil:
		w.add("answered")
	case errors.Is(err, context.Canceled):
		w.add("gave-up")
	default:
		w.add("failed")
	}
}
func (w *watchLog) add(e string) { w.mu.Lock(); w.events = append(w.events, e); w.mu.Unlock() }
func (w *watchLog) take() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.Join(w.events, " ")
	w.events = nil
	return s
}

// TestPipeWatch: Config.Watch hears of every request on the producer's own
// connections, each sent once and done once: the connection set-up, an
// answer, a connection cut with two requests out, a dial that fails, and
// requests given up by Close.
func TestPipeWatch(t *testing.T) {
	cut := scriptedBroker(t, func(c net.Conn, next func() (frame, bool)) {
		f, _ := next()
		answer(c, f, 1)
		next()
		next()
		c.Close()
	})
	silent := scriptedBroker(t, func(c net.Conn, next func() (frame, bool)) {
		for _, ok := next(); ok; _, ok = next() {
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()

	w := &watchLog{}
	p := &Producer{cfg: Config{TransactionalID: "x", Dialer: &Dialer{Timeout: 5 * time.Second}, Watch: w},
		pipes: map[int32]*pipe{}, addrs: map[int32]string{1: cut, 2: silent, 3: refused}}
	ctx := context.Background()
	step := func(what, want string, f func()) {
		t.Helper()
		f()
		if got := w.take(); got != want {
			t.Errorf("%s: watch heard %q, want %q", what, got, want)
		}
	}
	var pp *pipe
	step("dial", "sent answered", func() {
		if pp, err = p.pipeTo(ctx, 1); err != nil {
			t.Fatal(err)
		}
	})
	step("answer", "sent answered", func() {
		c, err := pp.send(pipeRequest(p), 5*time.Second)
		if err == nil {
			_, err = pp.wait(ctx, c)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	step("cut", "sent sent failed failed", func() {
		c1, _ := pp.send(pipeRequest(p), 5*time.Second)
		c2, _ := pp.send(pipeRequest(p), 5*time.Second)
		pp.wait(ctx, c1)
		pp.wait(ctx, c2)
	})
	step("refused dial", "sent failed", func() {
		if _, err := p.pipeTo(ctx, 3); err == nil {
			t.Fatal("dial to a closed port worked")
		}
	})
	step("close", "sent answered sent gave-up", func() {
		pp, err := p.pipeTo(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := pp.send(pipeRequest(p), 5*time.Second)
		p.Close()
		pp.wait(ctx, c)
	})
}
