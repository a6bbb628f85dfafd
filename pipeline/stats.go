package pipeline

import (
	"github.com/dedupstream/dedupstream/filter"
	"github.com/dedupstream/dedupstream/statestore"
)

// Stats is a snapshot of a stage's state for metrics and benchmarks: values,
// not the live Bloom front and store, so a caller cannot change the stage
// through them.
type Stats struct {
	// Generation is the stage's current (newest) generation.
	Generation uint64
	// LiveGenerations is how many generations the window holds.
	LiveGenerations int
	// Filter describes the Bloom front's live generations, newest first.
	Filter []filter.GenStats
	// FilterBytes is the Bloom front's memory when every generation is
	// allocated, in bytes.
	FilterBytes float64
	// EstimatedFPR is the probability, estimated from the bits set, that
	// the Bloom front reports an absent key as maybe present.
	EstimatedFPR float64
	// DiskBytes is what the store occupies on disk.
	DiskBytes uint64
	// Store describes the store's generation buckets holding live keys,
	// oldest first; nil when StoreErr is set.
	Store    []statestore.GenStats
	StoreErr error
}

// Stats returns the stage's statistics. It counts every bit of the Bloom
// front (about 1 ms per 10 MB) and asks the store for its sstables' sizes:
// call it between cycles for metrics, not per batch.
func (s *Stage) Stats() Stats {
	cfg := s.filter.Config()
	st := Stats{
		Generation:      s.cur,
		LiveGenerations: int(cfg.Generations),
		Filter:          s.filter.Stats(),
		FilterBytes:     s.filter.BytesPerKey() * float64(cfg.KeysPerGeneration) * float64(cfg.Generations),
		EstimatedFPR:    s.filter.EstimatedFalsePositiveRate(),
		DiskBytes:       s.store.DiskUsage(),
	}
	st.Store, st.StoreErr = s.store.Generations()
	return st
}
