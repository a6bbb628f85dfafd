package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dedupstream/dedupstream/sink"
)

// onFenced decides what a stage does after its producer was fenced. It
// returns nil when the stage takes its transactional id back and recovers
// in place (after kafka.on_fenced_backoff), or the error to stop with.
//
// A fence has two causes (see sink.FencedError): another producer
// initialised the id, or the transaction coordinator aborted our
// transaction after it stayed open past the transaction timeout (the brokers
// were unreachable, or the process stalled) and bumped the epoch. After the
// second nobody owns the id but us: InitProducerID takes it back, which also
// settles anything of ours still in flight, and recovery reads the committed
// output, so exactly-once holds as after any restart. After the first,
// taking it back would fence the other owner: static mode stops; group mode
// rejoins the group, which decides who owns the partition. When the cause
// cannot be decided, kafka.on_fenced says which way a static stage goes.
//
// Taking the id back is watched by the same rule: if another instance does
// run the partition, it fences us again while our transaction is younger
// than the timeout, which is decided as a takeover, and we stop.
func (r *runner) onFenced(ctx context.Context, err error) error {
	var fe *sink.FencedError
	cause := sink.FenceTakenOver
	if errors.As(err, &fe) {
		cause = fe.Cause
	}
	r.j.links.fenced(r.p, cause.String())
	id := r.prod.TransactionalID()
	if r.group.MemberID != "" {
		why := "the partition moved to another group member (a rebalance, or this member missed its heartbeats)"
		if cause == sink.FenceTimedOut {
			why = "the transaction coordinator aborted our transaction after the transaction timeout (the brokers were unreachable or the process stalled); the group decides again who runs the partition"
		}
		return fmt.Errorf("partition %d: fenced: %s: %w", r.p, why, err)
	}
	recoverIt := cause == sink.FenceTimedOut || cause == sink.FenceUndecided && r.j.cfg.Kafka.OnFenced == "recover"
	switch {
	case fe == nil || cause == sink.FenceTakenOver:
		return fmt.Errorf("partition %d: fenced: another instance took over transactional id %q (is this partition assigned to two instances, or did an operator fence the id?): %w", r.p, id, err)
	case !recoverIt:
		return fmt.Errorf("partition %d: fenced, cause undecided: either the transaction coordinator aborted our transaction after it stayed open %v, past kafka.transaction_timeout %v (the brokers were unreachable or the process stalled), or another instance took over transactional id %q. "+
			"If no other instance runs partition %d, restart this one (kafka.on_fenced: recover does that by itself); otherwise fix the assignment: %w",
			r.p, fe.OpenFor.Round(time.Millisecond), fe.Timeout, id, r.p, err)
	}
	wait := r.j.cfg.Kafka.OnFencedBackoff
	if cause == sink.FenceTimedOut {
		r.log.Warn("the transaction coordinator aborted our open transaction after the transaction timeout and bumped the epoch (the brokers were unreachable or the process stalled); no other instance holds the id: taking it back and recovering from the output",
			"transactional_id", id, "open_for", fe.OpenFor.Round(time.Millisecond), "transaction_timeout", fe.Timeout, "after", wait)
	} else {
		r.log.Warn("fenced, cause undecided: either the coordinator aborted our transaction after the transaction timeout, or another instance took the transactional id over; kafka.on_fenced is recover: taking the id back and recovering from the output (if another instance runs this partition, one of the two is fenced again while its transaction is young and stops)",
			"transactional_id", id, "open_for", fe.OpenFor.Round(time.Millisecond), "transaction_timeout", fe.Timeout, "after", wait, "err", err)
	}
	r.owned = false // the next recovery initialises the id anew
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}
