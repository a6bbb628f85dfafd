package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dedupstream/dedupstream/sink"
)

// onFenced decides what a stage (or a route step, through Job.onFenced) does after its producer was fenced. It
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
	return r.j.onFenced(ctx, fenceSite{what: fmt.Sprintf("partition %d", r.p), p: r.p, prod: r.prod, owned: &r.owned,
		group: r.group.MemberID != "", log: r.log}, err)
}

// fenceSite is the task whose producer was fenced: a stage or a route step.
type fenceSite struct {
	what  string // "partition 3", "route raw/2"
	p     int    // the stage's partition for the metrics, -1 for a route step
	prod  *sink.Producer
	owned *bool // as runner.owned
	group bool  // assignment mode group
	log   *slog.Logger
}

func (j *Job) onFenced(ctx context.Context, s fenceSite, err error) error {
	var fe *sink.FencedError
	cause := sink.FenceTakenOver
	if errors.As(err, &fe) {
		cause = fe.Cause
	}
	if s.p >= 0 {
		j.links.fenced(s.p, cause.String())
	}
	id := s.prod.TransactionalID()
	if s.group {
		why := "the partition moved to another group member (a rebalance, or this member missed its heartbeats)"
		if cause == sink.FenceTimedOut {
			why = "the transaction coordinator aborted our transaction after the transaction timeout (the brokers were unreachable or the process stalled); the group decides again who runs the partition"
		}
		return fmt.Errorf("%s: fenced: %s: %w", s.what, why, err)
	}
	recoverIt := cause == sink.FenceTimedOut || cause == sink.FenceUndecided && j.cfg.Kafka.OnFenced == "recover"
	switch {
	case fe == nil || cause == sink.FenceTakenOver:
		return fmt.Errorf("%s: fenced: another instance took over transactional id %q (are two instances assigned this partition, or did an operator fence the id?): %w", s.what, id, err)
	case !recoverIt:
		return fmt.Errorf("%s: fenced, cause undecided: either the transaction coordinator aborted our transaction after it stayed open %v, past kafka.transaction_timeout %v (the brokers were unreachable or the process stalled), or another instance took over transactional id %q. "+
			"If no other instance runs it, restart this one (kafka.on_fenced: recover does that by itself); otherwise fix the assignment: %w",
			s.what, fe.OpenFor.Round(time.Millisecond), fe.Timeout, id, err)
	}
	wait := j.cfg.Kafka.OnFencedBackoff
	if cause == sink.FenceTimedOut {
		s.log.Warn("the transaction coordinator aborted our open transaction after the transaction timeout and bumped the epoch (the brokers were unreachable or the process stalled); no other instance holds the id: taking it back and recovering from the output",
			"transactional_id", id, "open_for", fe.OpenFor.Round(time.Millisecond), "transaction_timeout", fe.Timeout, "after", wait)
	} else {
		s.log.Warn("fenced, cause undecided: either the coordinator aborted our transaction after the transaction timeout, or another instance took the transactional id over; kafka.on_fenced is recover: taking the id back and recovering from the output (if another instance runs this partition, one of the two is fenced again while its transaction is young and stops)",
			"transactional_id", id, "open_for", fe.OpenFor.Round(time.Millisecond), "transaction_timeout", fe.Timeout, "after", wait, "err", err)
	}
	*s.owned = false // the next recovery initialises the id anew
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}
