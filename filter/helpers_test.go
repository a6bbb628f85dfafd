package filter

import (
	"encoding/binary"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

// Key namespaces keep the key sets of a test disjoint.
const (
	nsPresent byte = iota + 1
	nsAbsent
	nsOther
)

// key returns the hash of the i-th business key of namespace ns, computed the
// way the pipeline does (xxh3-128 of the key bytes).
func key(ns byte, i uint64) partition.Hash {
	var b [9]byte
	b[0] = ns
	binary.LittleEndian.PutUint64(b[1:], i)
	return partition.HashKey(b[:])
}

func mustNew(tb testing.TB, cfg Config, gen uint64) *Filter {
	tb.Helper()
	f, err := New(cfg, gen)
	if err != nil {
		tb.Fatalf("New(%+v, %d): %v", cfg, gen, err)
	}
	return f
}

// fillWindow returns a filter whose Generations live generations each got
// KeysPerGeneration distinct keys through Add, advancing one generation at a
// time as the pipeline does. Key i of the window is key(nsPresent, i).
func fillWindow(tb testing.TB, cfg Config) *Filter {
	tb.Helper()
	f := mustNew(tb, cfg, 0)
	var i uint64
	for g := range uint64(cfg.Generations) {
		f.Advance(g)
		for range cfg.KeysPerGeneration {
			f.Add(key(nsPresent, i))
			i++
		}
	}
	return f
}
