package statestore

import "sync/atomic"

// holds counts the holders of memory a live run keeps beside its sstables
// (its filter, memFilter; its block fences and open files, runBlocks): the
// run registry, from the run's recording until it is merged or expired
// (drop), and each Reader that captured the run (acquire, unref). Whoever
// lets go last frees the owner's memory; the owner embeds holds and says
// what that is. release gives back the block cache reservation of the
// memory (Store.keepFilters sets it under regMu as the run is recorded);
// it returns when the registry lets go, before the last Reader does: the
// budget counts the memory of live runs, a Reader's hold is brief.
//
// The zero value has no holder; init gives it the one that creates it.
type holds struct {
	refs    atomic.Int32
	dropped atomic.Bool
	release func() // of the reservation; nil once released
}

// init records the creator's hold (the registry's, once it records the
// run).
func (h *holds) init() { h.refs.Store(1) }

// acquire takes one more hold; false once the last holder let go (the
// memory is freed or being freed: the caller reads the run without it).
func (h *holds) acquire() bool {
	for {
		r := h.refs.Load()
		if r <= 0 {
			return false
		}
		if h.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// unref lets go of one hold; true for the last holder, which must free
// the memory.
func (h *holds) unref() bool { return h.refs.Add(-1) == 0 }

// drop releases the reservation and lets go of the registry's hold, once
// however often it is called; true if that was the last hold (see unref).
func (h *holds) drop() bool {
	if h.release != nil {
		h.release()
		h.release = nil
	}
	return h.dropped.CompareAndSwap(false, true) && h.unref()
}
