package sink

import (
	"context"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/addoffsetstotxn"
)

// earlyOffsets is a coordinator call sent ahead on a goroutine: an
// AddOffsetsToTxn ahead of SendOffsets (AddOffsetsEarly), or the whole of
// SendOffsets ahead of the transaction's produce requests
// (SendOffsetsAhead, offsets set).
type earlyOffsets struct {
	group   string
	offsets bool // TxnOffsetCommit follows the AddOffsetsToTxn
	done    chan struct{}
	added   bool // the group is part of the transaction
	err     error
}

// AddOffsetsEarly sends the open transaction's AddOffsetsToTxn for group
// now, without waiting for the answer, so that it overlaps the
// transaction's produce requests instead of adding a round trip to
// SendOffsets. It does nothing when the group is already part of the
// transaction or a call is out. Its outcome is taken by the next
// coordinator request (SendOffsets, Commit, Abort, a first produce to a
// new partition); when it failed, SendOffsets sends it again (adding a
// group twice is harmless) and reports that failure.
func (p *Producer) AddOffsetsEarly(ctx context.Context, group string) {
	if p.state != stateTxn || group == "" || p.early != nil {
		return
	}
	if _, ok := p.txnGroups[group]; ok {
		return
	}
	p.touch()
	e := &earlyOffsets{group: group, done: make(chan struct{})}
	p.early = e
	c := p.addOffsetsCall(group)
	go func() {
		_, e.err = p.callCoordinator(ctx, c)
		e.added = e.err == nil
		close(e.done)
	}()
}

// SendOffsetsAhead is SendOffsets without waiting for the transaction's
// produce requests: AddOffsetsToTxn (unless the group is part of the
// transaction) and TxnOffsetCommit go to the coordinator now, on a
// goroutine, while the batches are still out, instead of after them: one
// round trip fewer before EndTxn. Kafka orders nothing between a
// transaction's offset commit and its records (the Java producer sends
// them as they come); EndTxn is what must follow both. OffsetsSent waits
// for the outcome; Commit waits for it too and fails with its error. A
// later SendOffsets of the same partitions replaces these offsets in the
// transaction (the coordinator keeps the last of each).
func (p *Producer) SendOffsetsAhead(ctx context.Context, g Group, offsets []Offset) error {
	if send, err := p.offsetsToSend(g, offsets); !send {
		return err
	}
	p.joinEarly() // one coordinator call at a time
	p.touch()
	_, added := p.txnGroups[g.ID]
	e := &earlyOffsets{group: g.ID, offsets: true, added: added, done: make(chan struct{})}
	p.early = e
	add, commit := p.addOffsetsCall(g.ID), p.offsetCommitCall(g, offsets)
	go func() {
		defer close(e.done)
		if !e.added {
			if _, e.err = p.callCoordinator(ctx, add); e.err != nil {
				return
			}
			e.added = true
		}
		_, e.err = p.callCoordinator(ctx, commit)
	}()
	return nil
}

// OffsetsSent waits for the offsets SendOffsetsAhead sent and returns
// their outcome (nil when none were sent). After an error the transaction
// can only be aborted.
func (p *Producer) OffsetsSent() error {
	p.joinEarly()
	err := p.aheadErr
	p.aheadErr = nil
	if err != nil {
		return p.fail(context.Background(), err)
	}
	return nil
}

// joinEarly waits for a call sent ahead and notes its group as part of the
// transaction when it was added; the error of offsets sent ahead is kept
// for OffsetsSent and Commit (that of an early AddOffsetsToTxn alone is
// not: SendOffsets sends it again). Until it returns, the calling
// goroutine must not use the coordinator cache.
func (p *Producer) joinEarly() {
	e := p.early
	if e == nil {
		return
	}
	<-e.done
	p.early = nil
	if p.state != stateTxn {
		return
	}
	if e.added {
		p.txnGroups[e.group] = struct{}{}
	}
	if e.offsets && e.err != nil && p.aheadErr == nil {
		p.aheadErr = e.err
	}
}

// addOffsetsCall is AddOffsetsToTxn for group in the open transaction.
func (p *Producer) addOffsetsCall(group string) call {
	pid, epoch := p.pid, p.epoch
	return call{
		op:             "add offsets to txn",
		topic:          group,
		partition:      -1,
		pollPendingEnd: true,
		build: func() protocol.Message {
			return &addoffsetstotxn.Request{
				TransactionalID: p.cfg.TransactionalID,
				ProducerID:      pid,
				ProducerEpoch:   epoch,
				GroupID:         group,
			}
		},
		code: func(m protocol.Message) kafka.Error { return kafka.Error(m.(*addoffsetstotxn.Response).ErrorCode) },
	}
}
