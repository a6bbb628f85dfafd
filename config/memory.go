package config

import "github.com/dedupstream/dedupstream/statestore"

// validateMemory checks the state memory budget. In static mode the number
// of stores is known, so a budget too small for them is refused here; in
// group mode it is known per generation, and the job reports a budget that
// does not fit then (see statestore.PlanMemTable).
func (s *State) validateMemory(v *validator, a *Assignment) {
	if s.CacheSize != 0 {
		v.addf("state.cache_size", "replaced by state.memory, one budget for the block cache and memtables of every store of the instance (this one was %v per store): remove it and size state.memory", s.CacheSize)
	}
	if s.Memory < ByteSize(statestore.MinMemory) {
		v.addf("state.memory", "must be >= %v, got %v", ByteSize(statestore.MinMemory), s.Memory)
		return
	}
	mt := uint64(s.MemTableSize)
	if mt != 0 && (mt < statestore.MinMemTableSize || mt > statestore.MaxMemTableSize) {
		v.addf("state.memtable_size", "must be between %v and 4GiB, or 0 to derive it from state.memory, got %v",
			ByteSize(statestore.MinMemTableSize), s.MemTableSize)
		return
	}
	n := len(a.Partitions)
	if a.Mode != "static" || n == 0 {
		return
	}
	if _, fits := statestore.PlanMemTable(int64(s.Memory), mt, n); fits {
		return
	}
	need := ByteSize(statestore.MinMemoryFor(mt, n))
	if mt == 0 {
		v.addf("state.memory", "%v is too small for %d partitions: each store's 3 memtables of at least %v must fit in half of it; "+
			"raise it to at least %v, or set state.memtable_size", s.Memory, n, ByteSize(statestore.MinPlannedMemTableSize), need)
		return
	}
	v.addf("state.memtable_size", "%d partitions x 3 memtables of %v exceed half of state.memory (%v): lower it, or raise state.memory to at least %v",
		n, s.MemTableSize, s.Memory, need)
}
