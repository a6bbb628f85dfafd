//go:build !race && !invariants

package statestore

// readOnCaller: Pebble's read path calls no Fatalf in this build (see
// readpath.go), so reads call into Pebble on the caller's goroutine.
const readOnCaller = true

// read runs fn, a read-path call into Pebble, on the caller's goroutine. fn
// does not escape: reads stay allocation-free.
func (s *Store) read(fn func() error) error { return fn() }
