package fetch

import (
	"context"
	"encoding/binary"
	"fmt"
)

// BatchHead is what a stored record batch's header says about who wrote it.
type BatchHead struct {
	BaseOffset, LastOffset int64
	ProducerID             int64 // -1: written without a producer id
	// Control says the batch is a transaction marker.
	Control bool
}

// isolationReadUncommitted is the Fetch isolation level that reads up to
// the high watermark, open and aborted transactions included.
const isolationReadUncommitted = 0

// Heads returns the headers of the record batches stored in the offsets
// [from, to), read_uncommitted: batches of open and aborted transactions
// and transaction markers included. It stops early at the high watermark
// (the batches past it are not readable yet). The position of Fetch is
// left alone; retries are as Fetch's.
func (f *Fetcher) Heads(ctx context.Context, from, to int64) ([]BatchHead, error) {
	var (
		heads []BatchHead
		ex    *fetchExchange
		frame []byte
	)
	for pos := from; pos < to; {
		var hw int64
		start := pos
		err := f.retry(ctx, "read batch headers", func() error {
			if err := f.findLeader(ctx); err != nil {
				return err
			}
			// Answered at once: the offsets asked for are stored.
			p, err := f.exchangeOnce(ctx, &ex, isolationReadUncommitted, &frame, pos, Wait{Max: f.opts.MaxWait, MinBytes: 1})
			if err != nil {
				return err
			}
			if err := partitionError(p.errorCode); err != nil {
				return err // out of range: the caller asked for offsets not stored
			}
			hw = p.highWatermark
			n := len(heads)
			heads, err = appendHeads(heads, p.records, pos, to)
			if len(heads) > n {
				pos = heads[len(heads)-1].LastOffset + 1
			}
			return err
		})
		if err != nil {
			return heads, fmt.Errorf("fetch: %s[%d]: %w", f.topic, f.partition, err)
		}
		if pos >= hw || pos == start {
			break // nothing more readable
		}
	}
	return heads, nil
}

// appendHeads appends to heads the headers of the whole batches of rs that
// end at or after from and start before to.
func appendHeads(heads []BatchHead, rs []byte, from, to int64) ([]BatchHead, error) {
	for len(rs) >= batchLengthEnd {
		length := int64(int32(binary.BigEndian.Uint32(rs[8:])))
		if length < batchHeaderSize-batchLengthEnd {
			return heads, fmt.Errorf("%w: record batch length %d", errCorrupt, length)
		}
		if int64(len(rs)) < batchLengthEnd+length {
			break // cut at MaxBytes: the next request starts at it
		}
		raw := rs[:batchLengthEnd+length]
		rs = rs[len(raw):]
		h := BatchHead{
			BaseOffset: int64(binary.BigEndian.Uint64(raw)),
			ProducerID: int64(binary.BigEndian.Uint64(raw[batchProducerID:])),
			Control:    binary.BigEndian.Uint16(raw[batchAttributes:])&attrControl != 0,
		}
		h.LastOffset = h.BaseOffset + int64(int32(binary.BigEndian.Uint32(raw[batchLastDelta:])))
		if h.LastOffset >= from && h.BaseOffset < to {
			heads = append(heads, h)
		}
	}
	return heads, nil
}
