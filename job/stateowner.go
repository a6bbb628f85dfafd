package job

// A store's checkpoint names the input partitions it read (each of
// partition p, the stage's). A state directory copied or renamed from
// another partition's (an operator restoring a backup into the wrong
// place, or "fixing" a lost directory with a neighbour's) would pass every
// other check: its partition count and dedup settings are right, and its
// output offset points into the wrong output partition, so the stage
// would restore only the tail of its own output past that offset and miss
// the keys before it, and their replays would pass. checkStateOwner
// refuses it.

// checkStateOwner refuses a store whose checkpoint records input offsets
// of another partition than the stage's.
func (r *runner) checkStateOwner(ck Checkpoint) error {
	for _, in := range ck.Inputs {
		if int(in.Partition) == r.p {
			continue
		}
		return fatalf("state %s holds the state of partition %d, not %d (its checkpoint records input %s/%d): the directory was copied or renamed "+
			"from another partition's. Put it back under partition-%d, or remove %s (the stage then restores its state from output partition %d)",
			r.j.stateDir(r.p), in.Partition, r.p, in.Topic, in.Partition, in.Partition, r.j.stateDir(r.p), r.p)
	}
	return nil
}
