package statestore

// settle waits until the flusher's queued flushes and the merges they made
// due are done: the merger is kicked by each flush before the worker takes
// its next task, so a no-op on the worker, then one on the merger, returns
// once both are idle.
func (s *Store) settle() error {
	if err := s.w.do(func() error { return nil }); err != nil {
		return err
	}
	return s.mg.w.do(func() error { return nil })
}

// settleFlushes waits until the flushes queued so far are done (not the
// merges they made due).
func (s *Store) settleFlushes() error {
	return s.w.do(func() error { return nil })
}
