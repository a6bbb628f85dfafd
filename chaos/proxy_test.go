package chaos

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// fakeBroker answers every request frame with a response frame carrying the
// request's correlation id and api key.
// Kafka api keys the suite looks at (only its tests name them).
const (
	apiProduce  int16 = 0
	apiMetadata int16 = 3
	apiEndTxn   int16 = 26
)

func fakeBroker(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forwardFrames(c, io.Discard, func(req []byte) bool {
				var res [4 + 4 + 2]byte
				binary.BigEndian.PutUint32(res[0:4], 6)
				copy(res[4:8], req[4:8])
				copy(res[8:10], req[0:2])
				c.Write(res[:])
				return false
			})
		}
	}()
	return ln.Addr().String()
}

// roundTrip sends one request with api key and correlation id and returns
// the response's correlation id and api key, or the read error.
func roundTrip(c net.Conn, key int16, corr int32) (int32, int16, error) {
	var req [4 + 8]byte
	binary.BigEndian.PutUint32(req[0:4], 8)
	binary.BigEndian.PutUint16(req[4:6], uint16(key))
	binary.BigEndian.PutUint32(req[8:12], uint32(corr))
	if _, err := c.Write(req[:]); err != nil {
		return 0, 0, err
	}
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	var res [10]byte
	if _, err := io.ReadFull(c, res[:]); err != nil {
		return 0, 0, err
	}
	return int32(binary.BigEndian.Uint32(res[4:8])), int16(binary.BigEndian.Uint16(res[8:10])), nil
}

// TestProxyLoses checks the framing and both ways of losing a response:
// other requests pass, a lost response with LoseAndClose ends the
// connection, with LoseAndStall the client hears nothing more.
func TestProxyLoses(t *testing.T) {
	for _, loss := range []Loss{LoseAndClose, LoseAndStall} {
		broker := fakeBroker(t)
		ps, err := StartProxies([]string{broker}, func(key int16) Loss {
			if key == apiProduce {
				return loss
			}
			return Deliver
		})
		if err != nil {
			t.Fatal(err)
		}
		addr, err := ps.Route(broker)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ps.Route("127.0.0.1:1"); err == nil {
			t.Error("Route of an unknown broker succeeded")
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		for corr := range int32(3) {
			if gotCorr, gotKey, err := roundTrip(c, apiMetadata, corr); err != nil || gotCorr != corr || gotKey != apiMetadata {
				t.Fatalf("loss %d: metadata request %d: got correlation %d key %d, %v", loss, corr, gotCorr, gotKey, err)
			}
		}
		_, _, err = roundTrip(c, apiProduce, 9)
		switch {
		case loss == LoseAndClose && !errors.Is(err, io.EOF):
			t.Errorf("LoseAndClose: read after a lost produce response = %v, want EOF", err)
		case loss == LoseAndStall && !errors.Is(err, os.ErrDeadlineExceeded):
			t.Errorf("LoseAndStall: read after a lost produce response = %v, want a timeout", err)
		}
		if loss == LoseAndStall {
			if _, _, err := roundTrip(c, apiMetadata, 10); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("LoseAndStall: a later response got through: %v", err)
			}
		}
		c.Close()
		if got := ps.Lost()[apiProduce]; got != 1 {
			t.Errorf("loss %d: Lost()[produce] = %d, want 1", loss, got)
		}
		if err := ps.Close(); err != nil {
			t.Error(err)
		}
	}
}
