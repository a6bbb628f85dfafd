package sink

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
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
