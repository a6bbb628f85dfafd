package sink

import (
	"context"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/addoffsetstotxn"
)

// earlyOffsets is an AddOffsetsToTxn sent ahead of SendOffsets.
type earlyOffsets struct {
	group string
	done  chan struct{}
	err   error
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
		close(e.done)
	}()
}

// joinEarly waits for an early AddOffsetsToTxn and notes its group as part
// of the transaction when it succeeded. Until it returns, the calling
// goroutine must not use the coordinator cache.
func (p *Producer) joinEarly() {
	e := p.early
	if e == nil {
		return
	}
	<-e.done
	p.early = nil
	if e.err == nil && p.state == stateTxn {
		p.txnGroups[e.group] = struct{}{}
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
