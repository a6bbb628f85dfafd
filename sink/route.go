package sink

import (
	"errors"
	"io"

	"github.com/segmentio/kafka-go/protocol"
)

// routed carries a request to a broker the producer chose, bypassing the
// routing of kafka-go's Transport, which would look up the coordinator with
// a FindCoordinator request before every transactional or group request and
// route produce requests with metadata cached for up to MetadataTTL.
//
// It works with the Transport's public extension points: the Transport sends
// a protocol.BrokerMessage to the broker its Broker method names (a negative
// id means the bootstrap connection), and the broker connection hands a
// protocol.RawExchanger the connection, over which the inner message goes
// out with the API version negotiated for that connection.
//
// The answer comes back wrapped in a routedResponse so the Transport does
// not treat it as its own (it refreshes its metadata cache on
// *metadata.Response, asserting the request type).
type routed struct {
	msg    protocol.Message
	broker int32
}

var (
	_ protocol.BrokerMessage = (*routed)(nil)
	_ protocol.RawExchanger  = (*routed)(nil)
)

func (r *routed) ApiKey() protocol.ApiKey { return r.msg.ApiKey() }

func (r *routed) Broker(protocol.Cluster) (protocol.Broker, error) {
	return protocol.Broker{ID: r.broker}, nil
}

func (r *routed) Required(map[protocol.ApiKey]int16) bool { return true }

var errNotProtocolConn = errors.New("sink: transport connection is not a *protocol.Conn")

func (r *routed) RawExchange(rw io.ReadWriter) (protocol.Message, error) {
	c, ok := rw.(*protocol.Conn)
	if !ok {
		return nil, errNotProtocolConn
	}
	res, err := c.RoundTrip(r.msg)
	if err != nil {
		return nil, err
	}
	return &routedResponse{msg: res}, nil
}

type routedResponse struct{ msg protocol.Message }

func (r *routedResponse) ApiKey() protocol.ApiKey { return r.msg.ApiKey() }
