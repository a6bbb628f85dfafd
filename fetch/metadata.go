package fetch

import (
	"context"
	"errors"
	"fmt"

	"github.com/segmentio/kafka-go"
	meta "github.com/segmentio/kafka-go/protocol/metadata"
)

// PartitionCounts returns the partition count of each of topics that
// exists, asked of the bootstrap broker with a Metadata request that
// bypasses the transport's metadata cache: kafka.Transport answers Metadata
// from a cache refreshed only every MetadataTTL (6 s by default), so a
// partition count read through kafka.Client.Metadata may be that old. A
// topic that does not exist is left out of the map; any other topic error
// is returned. clientID names the job in the request ("" for the
// transport's).
func PartitionCounts(ctx context.Context, client *kafka.Client, topics []string, clientID string) (map[string]int, error) {
	if client == nil || client.Addr == nil {
		return nil, errors.New("fetch: client: must have an Addr")
	}
	rt := client.Transport
	if rt == nil {
		rt = kafka.DefaultTransport
	}
	if t, ok := rt.(*kafka.Transport); ok && clientID == "" {
		clientID = t.ClientID
	}
	x := newExchange(&meta.Request{TopicNames: topics}, clientID)
	if _, err := rt.RoundTrip(ctx, client.Addr, x.toBootstrap()); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	res, ok := x.res.(*meta.Response)
	if !ok {
		return nil, fmt.Errorf("metadata: unexpected response %T", x.res)
	}
	counts := make(map[string]int, len(topics))
	for _, t := range res.Topics {
		switch err := kafka.Error(t.ErrorCode); {
		case t.ErrorCode == 0:
			counts[t.Name] = len(t.Partitions)
		case errors.Is(err, kafka.UnknownTopicOrPartition):
		default:
			return nil, fmt.Errorf("metadata: topic %q: %w", t.Name, err)
		}
	}
	return counts, nil
}
