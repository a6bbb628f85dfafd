package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/dedupstream/dedupstream/sink"
)

// acquire takes a task's transactional id over: InitProducerID the first
// time, which fences any previous owner and settles its open transaction,
// and Resume with the id and epoch held on every later recovery (KIP-360),
// so a replaced task is fenced instead of fencing its successor. Stages and
// route steps recover through it alike.
func acquire(ctx context.Context, prod *sink.Producer, owned *bool) error {
	init := prod.Init
	if *owned {
		init = prod.Resume
	}
	if err := init(ctx); err != nil {
		return fmt.Errorf("init producer: %w", err)
	}
	*owned = true
	return nil
}

// abortTxn ends prod's open transaction without effect and returns cause
// for the caller to classify, or the fencing the abort ran into. Any other
// abort failure is only logged: the next recovery's InitProducerID or
// Resume settles the transaction anyway.
func abortTxn(ctx context.Context, prod *sink.Producer, log *slog.Logger, cause error) error {
	if err := prod.Abort(ctx); err != nil {
		if errors.Is(err, sink.ErrFenced) {
			return err
		}
		log.Warn("abort failed", "err", err, "cause", cause)
	}
	return cause
}
