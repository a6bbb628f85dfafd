package sink

import (
	"context"
	"errors"
	"fmt"
)

// The window: with MaxInFlight > 1, Produce sends a record batch and goes
// on encoding and sending the next ones without waiting for the answer, up
// to MaxInFlight produce requests of the producer at a time. Sequence
// numbers are given out at send time, in send order, so the batches of a
// partition carry consecutive sequences and the broker appends them in that
// order only: a batch that arrives before its predecessor is refused with
// OUT_OF_ORDER_SEQUENCE_NUMBER and nothing is stored out of order.
//
// Answers are taken in send order (land). While every answer is a success
// the window just moves on. When one is not, every request still out is
// waited for, and then that batch and every later one that did not succeed
// is resent one at a time, in sequence order, with the usual retry policy
// (sendBatch): a resent batch the broker already stored is recognised by
// its sequence (the broker remembers a producer's last five batches per
// partition, hence at most five in flight) and not stored again. Nothing is
// reordered or stored twice; a batch that cannot be resent ends the
// transaction: ambiguous when any request of the window has an unknown
// outcome (Abort then bumps the epoch), else failed, with each partition's
// sequence set back to its first batch not stored. On the producer's own
// connection (Config.Dialer) nothing overtakes, so when the first failed
// batch's own answer says the broker disagrees with our producer state
// (out of sequence, unknown producer id) the transaction ends ambiguous
// at once, as it does with one batch at a time.

// MaxInFlightLimit is the most produce requests a producer keeps in flight:
// the number of batches per producer and partition a broker remembers to
// recognise a resent one.
const MaxInFlightLimit = 5

// flight is a produce request of the window: an encoded batch sent and not
// yet landed.
type flight struct {
	tp     topicPartition
	seq    int32 // base sequence
	n      int   // records
	buf    []byte
	landed bool          // done was received: out is final
	done   chan struct{} // capacity 1, reused with the flight
	out    sendOutcome
	// With a Dialer: the request written on the leader's connection,
	// answered there (instead of done).
	pipe *pipe
	call *pipeCall
}

// produceAsync is Produce with a window of MaxInFlight requests: it
// returns once every batch of recs is sent (encoded into buffers of the
// window, so recs may be reused), having landed the oldest requests as
// needed to make room. Errors of earlier batches surface here, in Flush,
// SendOffsets or Commit.
func (p *Producer) produceAsync(ctx context.Context, tp topicPartition, recs []Record) (ProduceResult, error) {
	res := ProduceResult{BaseOffset: -1, NextOffset: -1}
	for len(recs) > 0 {
		for len(p.flights) >= p.cfg.MaxInFlight {
			if err := p.land(ctx); err != nil {
				return res, err
			}
		}
		n, bound := p.batchSize(recs)
		if err := p.launch(ctx, tp, recs[:n], bound); err != nil {
			return res, err
		}
		res.Batches++
		recs = recs[n:]
	}
	return res, nil
}

// launch encodes recs as tp's next batch and sends it without waiting;
// bound is batchSize's for recs.
func (p *Producer) launch(ctx context.Context, tp topicPartition, recs []Record, bound int) error {
	f := p.newFlight()
	seq := p.seqs[tp]
	buf, err := p.encodeBatch(f.buf, seq, recs, bound)
	if err != nil {
		p.free = append(p.free, f)
		a := p.newAttempts(ctx, "produce", tp.topic, tp.partition)
		a.n = 1
		return a.fail(ClassFatal, 0, err)
	}
	f.tp, f.seq, f.n, f.buf = tp, seq, len(recs), buf
	p.seqs[tp] = nextSequence(seq, len(recs))
	p.flights = append(p.flights, f)
	leader, code, err := p.leader(ctx, tp)
	switch {
	case err != nil:
		f.out = sendOutcome{kind: sendRetry, cause: err}
		f.landed = true
	case code != 0:
		f.out = codeOutcome(code, code)
		f.landed = true
	case p.cfg.Dialer == nil:
		go p.fly(ctx, f, leader)
	default:
		if err := p.blocked(leader); err != nil {
			// A batch before this one failed: this one would reach the
			// broker first and be refused out of sequence. It goes again
			// with the window's resend, in order.
			f.out = sendOutcome{kind: sendRetry, cause: err}
			f.landed = true
			return nil
		}
		pp, c, err := p.pipeSend(ctx, leader, tp, f.buf)
		if err != nil {
			f.out = produceOutcome(nil, err, tp)
			f.landed = true
			return nil
		}
		f.pipe, f.call = pp, c
	}
	return nil
}

// blocked returns why the next batch for leader must not be sent now: a
// batch of the window before it already failed, or the connection its
// predecessors went on broke (their outcomes are unknown, so a batch on a
// new connection could overtake their resend).
func (p *Producer) blocked(leader int32) error {
	window := p.flights[:len(p.flights)-1] // all but the batch being sent
	for _, f := range window {
		if f.landed && f.out.kind != sendOK {
			return fmt.Errorf("sink: batch sent after a failed one: %w", f.out.cause)
		}
		if f.pipe != nil && f.pipe.broker == leader {
			if err := f.pipe.broken(); err != nil {
				return err
			}
		}
	}
	return nil
}

// fly runs one produce attempt of f. It touches nothing of the producer
// but f.out.
func (p *Producer) fly(ctx context.Context, f *flight, leader int32) {
	f.out = p.sendTo(ctx, leader, f.tp, f.buf)
	f.done <- struct{}{}
}

func (p *Producer) newFlight() *flight {
	if n := len(p.free); n > 0 {
		f := p.free[n-1]
		p.free = p.free[:n-1]
		return f
	}
	return &flight{done: make(chan struct{}, 1)}
}

// wait waits for f's answer.
func (f *flight) wait(ctx context.Context) {
	if f.landed {
		return
	}
	if f.call != nil {
		res, err := f.pipe.wait(ctx, f.call)
		f.out = produceOutcome(res, err, f.tp)
		f.pipe, f.call = nil, nil
	} else {
		<-f.done
	}
	f.landed = true
}

// recycle returns the window's flights to the free list. A buffer whose
// request had an unknown outcome may still be read by the transport: it
// is dropped, not reused.
func (p *Producer) recycle() {
	for i, f := range p.flights {
		if f.out.unknown {
			f.buf = nil
		}
		f.landed, f.out = false, sendOutcome{}
		p.free = append(p.free, f)
		p.flights[i] = nil
	}
	p.flights = p.flights[:0]
}

// stored records a batch the broker stored (base -1: a duplicate whose
// offset it did not say).
func (p *Producer) stored(f *flight, base int64) { p.landed(f.tp, base, f.n) }

// land takes the oldest request's answer; on anything but success it
// resends from there (resendWindow). An error leaves the window empty.
func (p *Producer) land(ctx context.Context) error {
	f := p.flights[0]
	f.wait(ctx)
	if f.out.kind != sendOK {
		err := p.resendWindow(ctx)
		p.recycle()
		return err
	}
	p.stored(f, f.out.base)
	if f.out.unknown {
		f.buf = nil
	}
	f.landed, f.out = false, sendOutcome{}
	copy(p.flights, p.flights[1:])
	p.flights[len(p.flights)-1] = nil
	p.flights = p.flights[:len(p.flights)-1]
	p.free = append(p.free, f)
	return nil
}

// flush lands every request of the window.
func (p *Producer) flush(ctx context.Context) error {
	for len(p.flights) > 0 {
		if err := p.land(ctx); err != nil {
			return err
		}
	}
	return nil
}

// resendWindow runs when the oldest request of the window did not succeed:
// it waits for every request still out, then resends, in order, each
// batch that did not succeed. A fenced or fatal answer anywhere in the
// window ends it without resending.
func (p *Producer) resendWindow(ctx context.Context) error {
	unknown := false
	for _, f := range p.flights {
		f.wait(ctx)
		unknown = unknown || f.out.unknown
	}
	for _, f := range p.flights {
		var class Class
		switch f.out.kind {
		case sendFenced:
			class = ClassFenced
		case sendFatal:
			class = ClassFatal
		default:
			continue
		}
		a := p.newAttempts(ctx, "produce", f.tp.topic, f.tp.partition)
		a.n = 1
		err := a.fail(class, f.out.code, f.out.cause)
		return p.windowFailed(a, err, unknown)
	}
	for i, f := range p.flights {
		if f.out.kind == sendOK {
			p.stored(f, f.out.base)
			continue
		}
		a := p.newAttempts(ctx, "produce", f.tp.topic, f.tp.partition)
		a.n = 1 // the attempt in the window
		if i == 0 {
			// The first failure is the batch's own; the later ones
			// followed from it (out of sequence) and go again at once.
			switch f.out.kind {
			case sendRetryLeader:
				delete(p.leaders, f.tp)
				fallthrough
			case sendRetry:
				if !a.again(f.out.cause) {
					return p.windowFailed(a, a.fail(ClassRetriable, f.out.code, f.out.cause), unknown)
				}
			case sendAmbiguous:
				if p.cfg.Dialer != nil {
					// On one connection nothing overtakes: the broker
					// disagrees with our producer state, as when one
					// batch at a time is sent (sendBatch).
					return p.windowFailed(a, p.ambiguousProduce(a, f.tp, f.out), true)
				}
			}
		}
		base, unk, err := p.sendBatch(a, f.tp, f.buf)
		if unk {
			f.out.unknown = true
			unknown = true
		}
		if err != nil {
			return p.windowFailed(a, err, unknown)
		}
		f.out = sendOutcome{kind: sendOK, base: base, unknown: f.out.unknown}
		p.stored(f, base)
	}
	p.log.Debug("sink: resent the produce window", "batches", len(p.flights))
	return nil
}

// windowFailed ends a window that could not be resent: ambiguous when any
// of its requests had an unknown outcome, else err, with the sequences of
// the partitions set back to their first batch not stored.
func (p *Producer) windowFailed(a *attempts, err error, unknown bool) error {
	if c := ClassOf(err); unknown && c != ClassFenced && c != ClassFatal {
		var amb *AmbiguousError
		if errors.As(err, &amb) {
			return err
		}
		var se *Error
		if errors.As(err, &se) {
			return a.ambiguous(se.Code, se.Err)
		}
		return a.ambiguous(0, err)
	}
	rolled := map[topicPartition]bool{}
	for _, f := range p.flights {
		if f.out.kind != sendOK && !rolled[f.tp] {
			p.seqs[f.tp] = f.seq
			rolled[f.tp] = true
		}
	}
	return err
}

// settleWindow waits for every request still out before the transaction
// ends without Commit. It reports whether the window was clean: every
// request stored, so the sequences are the broker's.
func (p *Producer) settleWindow() (clean bool) {
	clean = true
	for _, f := range p.flights {
		f.wait(context.Background()) // bounded by the request timeout
		clean = clean && f.out.kind == sendOK
	}
	p.recycle()
	return clean
}
