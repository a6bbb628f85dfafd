package fetch

import (
	"encoding/binary"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/segmentio/kafka-go/protocol"
)

// exchange carries one kafka-go protocol request through a kafka-go
// RoundTripper (normally *kafka.Transport, which owns connections, TLS, SASL
// and API-version negotiation) while this package decides where it goes and
// how the response is read:
//
//   - kafka.Transport routes Fetch and ListOffsets by its own cached
//     metadata, refreshed only every MetadataTTL, and answers Metadata
//     requests from that cache. After a leader move it keeps sending to the
//     old leader for up to MetadataTTL. An exchange sent with toBroker goes
//     to the broker this package chose from fresh metadata; one sent with
//     toBootstrap goes to the bootstrap connection and bypasses the cache.
//   - A Fetch response is read as raw bytes into the caller's Batch buffer
//     and decoded in place (decode.go) instead of through kafka-go's
//     reflection decoder, which allocates per batch and per header.
//
// Both use protocol.RawExchanger, the hook kafka-go's connection offers a
// message to run its own request/response cycle on the connection.
type exchange struct {
	msg      protocol.Message // the kafka-go request
	clientID string
	minVer   int16 // lowest acceptable negotiated version
	node     int32 // destination broker of toBroker

	asBroker    toBroker
	asBootstrap toBootstrap

	version int16            // negotiated version, set by Required
	raw     bool             // read the response frame into frame
	frame   []byte           // raw response body after the correlation id
	res     protocol.Message // decoded response when !raw
	maxSize int              // raw: largest acceptable frame

	// finished is set when RawExchange returns. If RoundTrip returned
	// early (context done) and finished is unset, the connection goroutine
	// may still be writing into frame: the exchange must be abandoned.
	finished atomic.Bool
}

var correlation atomic.Int32

func newExchange(msg protocol.Message, clientID string) *exchange {
	x := &exchange{msg: msg, clientID: clientID}
	x.asBroker = toBroker{x}
	x.asBootstrap = toBootstrap{x}
	return x
}

// toBroker returns x as a message routed to broker x.node. The message is
// part of x, so an abandoned exchange takes it along.
func (x *exchange) toBroker() protocol.Message { return &x.asBroker }

// toBootstrap returns x as a message sent on the bootstrap connection.
func (x *exchange) toBootstrap() protocol.Message { return &x.asBootstrap }

func (x *exchange) ApiKey() protocol.ApiKey { return x.msg.ApiKey() }

// Required records the version the connection negotiated for the request and
// asks for a raw exchange.
func (x *exchange) Required(versions map[protocol.ApiKey]int16) bool {
	v, ok := versions[x.msg.ApiKey()]
	if !ok {
		v = -1
	}
	x.version = v
	return true
}

func (x *exchange) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	defer x.finished.Store(true)
	if x.version < x.minVer {
		return nil, fmt.Errorf("broker supports %s up to v%d, need v%d or later", x.msg.ApiKey(), x.version, x.minVer)
	}
	id := correlation.Add(1)
	if !x.raw {
		res, err := protocol.RoundTrip(rw, x.version, id, x.clientID, x.msg)
		x.res = res
		return x, err
	}
	if err := protocol.WriteRequest(rw, x.version, id, x.clientID, x.msg); err != nil {
		return nil, err
	}
	var hdr [8]byte
	if _, err := io.ReadFull(rw, hdr[:]); err != nil {
		return nil, unexpectedEOF(err)
	}
	size := int(int32(binary.BigEndian.Uint32(hdr[:]))) - 4
	if got := int32(binary.BigEndian.Uint32(hdr[4:])); got != id {
		return nil, fmt.Errorf("correlation id mismatch (expected %d, found %d)", id, got)
	}
	if size < 0 || size > x.maxSize {
		return nil, fmt.Errorf("%s response of %d bytes (limit %d)", x.msg.ApiKey(), size, x.maxSize)
	}
	if cap(x.frame) < size {
		x.frame = make([]byte, size, size+size/4)
	}
	x.frame = x.frame[:size]
	if _, err := io.ReadFull(rw, x.frame); err != nil {
		return nil, unexpectedEOF(err)
	}
	return x, nil
}

func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// toBroker sends an exchange to broker node.
type toBroker struct{ *exchange }

// Broker implements protocol.BrokerMessage.
func (m *toBroker) Broker(c protocol.Cluster) (protocol.Broker, error) {
	if b, ok := c.Brokers[m.node]; ok {
		return b, nil
	}
	return protocol.Broker{ID: -1}, fmt.Errorf("broker %d not in the transport's metadata yet", m.node)
}

// toBootstrap sends an exchange on the transport's bootstrap connection.
type toBootstrap struct{ *exchange }

var (
	_ protocol.BrokerMessage = (*toBroker)(nil)
	_ protocol.RawExchanger  = (*toBroker)(nil)
	_ protocol.RawExchanger  = (*toBootstrap)(nil)
)
