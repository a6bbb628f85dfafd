//go:build race || invariants

package statestore

// readOnCaller: in builds with the race or invariants tag Pebble compiles
// the Fatalf calls of its invariant checks into its iterators (its
// invariants.Enabled), so reads call into Pebble on the store's read worker,
// where Fatalf may park (see readpath.go). Reads then cost a hand-off each
// and allocate; the allocation tests skip this build.
const readOnCaller = false

// read runs fn, a read-path call into Pebble, on the store's read worker and
// returns its error, or the fatal error as soon as one is recorded. Reads of
// one store are serialised.
func (s *Store) read(fn func() error) error { return s.reads.do(fn) }
