package job

import (
	"context"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
)

// prefetcher reads a task's inputs in turn, one batch ahead: when it hands
// out the batch of one turn it has already sent the fetch of the next, so
// that fetch waits on the broker while the batch handed out is decided and
// produced (fetch.ahead; the default). Two batches alternate: the one
// handed out and the one being filled.
//
// A prefetched batch belongs to the next turn, which may be in the next
// cycle; the positions a cycle commits are those after the batches handed
// out (Positions), never the fetchers' own, which run one batch ahead.
// reset discards a batch in flight (after an abort its records are read
// again from the committed offsets), so nothing is lost or read twice.
//
// One goroutine of its own runs the fetches; the prefetcher is otherwise
// driven by the task's goroutine, which must not touch the fetchers while
// a fetch is in flight.
//
// Each fetch asks the broker for minBytes of records or the end of the
// cycle's read phase (until, set by phase), whichever comes first, and at
// most maxWait (commit.interval over the raw topics) in any case: at low
// input rates a stage reads and produces once or twice per cycle instead of
// once per produce request of its input, sparing the brokers (and its
// records wait for the commit either way). A fetch sent after the phase
// ended belongs to the next cycle, whose phase has not begun: it waits
// maxWait, which ends no later than that phase does.
type prefetcher struct {
	ins   []*fetch.Fetcher
	ahead bool // fetch the next turn's batch before it is asked for
	wait  fetch.Wait
	until time.Time // the end of the open cycle's read phase
	pos   []int64   // per input: the position after the last batch handed out
	bufs  [2]fetch.Batch
	out   int  // bufs[out] was handed out last
	turn  int  // input of the next batch handed out
	busy  bool // a fetch for ins[turn] into bufs[1-out] is in flight

	ctx    context.Context // the fetches' context since the last reset
	cancel context.CancelFunc
	reqs   chan prefetchReq
	res    chan prefetchRes
}

type prefetchReq struct {
	ctx  context.Context
	f    *fetch.Fetcher
	b    *fetch.Batch
	wait fetch.Wait
}

type prefetchRes struct {
	err error
	pos int64 // the fetcher's position after the fetch
}

// newPrefetcher reads ins in turn; each fetch waits for wait.MinBytes of
// records, the end of the read phase, or wait.Max.
func newPrefetcher(ins []*fetch.Fetcher, ahead bool, wait fetch.Wait) *prefetcher {
	p := &prefetcher{
		ins:   ins,
		ahead: ahead,
		wait:  wait,
		pos:   make([]int64, len(ins)),
		reqs:  make(chan prefetchReq),
		res:   make(chan prefetchRes, 1),
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	go p.work()
	return p
}

func (p *prefetcher) work() {
	for q := range p.reqs {
		err := q.f.FetchWait(q.ctx, q.b, q.wait)
		p.res <- prefetchRes{err: err, pos: q.f.Position()}
	}
}

// close discards a fetch in flight and ends the goroutine.
func (p *prefetcher) close() {
	p.discard()
	p.cancel()
	close(p.reqs)
}

// discard cancels a fetch in flight and waits for it to end. The fetcher
// it ran on is left wherever the fetch stopped: reset positions it.
func (p *prefetcher) discard() {
	if !p.busy {
		return
	}
	p.cancel()
	<-p.res
	p.busy = false
}

// reset discards a fetch in flight and positions input i at pos[i]; the
// next batch comes from input 0. Fetches run under ctx from here on.
func (p *prefetcher) reset(ctx context.Context, pos []int64) {
	p.discard()
	p.cancel()
	p.ctx, p.cancel = context.WithCancel(ctx)
	for i, f := range p.ins {
		f.SetPosition(pos[i])
		p.pos[i] = f.Position()
	}
	p.turn = 0
}

// positions returns into dst the input positions after the batches handed
// out.
func (p *prefetcher) positions(dst []int64) []int64 {
	return append(dst[:0], p.pos...)
}

// next returns the next turn's batch and its input, fetching it now unless
// it was fetched ahead, and (with ahead) sends the following turn's fetch.
// The batch stays valid until the next call. After an error the caller
// aborts and resets.
func (p *prefetcher) next() (*fetch.Batch, int, error) {
	if !p.busy {
		p.send()
	}
	r := <-p.res
	p.busy = false
	t := p.turn
	if r.err != nil {
		return nil, t, r.err
	}
	p.out = 1 - p.out
	p.pos[t] = r.pos
	p.turn = (t + 1) % len(p.ins)
	if p.ahead {
		p.send()
	}
	return &p.bufs[p.out], t, nil
}

// phase notes the end of the open cycle's read phase.
func (p *prefetcher) phase(end time.Time) { p.until = end }

// send starts the fetch of ins[turn] into the batch not handed out.
func (p *prefetcher) send() {
	p.busy = true
	w := p.wait
	if left := time.Until(p.until); left > 0 {
		w.Max = min(w.Max, left)
	}
	p.reqs <- prefetchReq{ctx: p.ctx, f: p.ins[p.turn], b: &p.bufs[1-p.out], wait: w}
}
