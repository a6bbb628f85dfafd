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
//
// Likewise a state directory of another job (two jobs' directories
// swapped on a host, a config copied with its state.dir): its keys are
// those another output topic received, so records of them would be
// dropped though this job never emitted them, and its output offset
// points into another log. The checkpoint names its output topic
// (version 4); a store of another output topic is refused too.

// checkStateOwner refuses a store whose checkpoint records input offsets
// of another partition than the stage's, or another output topic than the
// job's.
func (r *runner) checkStateOwner(ck Checkpoint) error {
	if out := r.j.cfg.Output.Topic; ck.OutputTopic != "" && ck.OutputTopic != out {
		return fatalf("state %s holds the keys of output topic %q, job %q writes %q: the directory belongs to another job (or to this one "+
			"before output.topic changed without `dedupstream migrate`). Point state.dir at this job's own directory, or remove %s "+
			"(the stage then restores its state from %s/%d)",
			r.j.stateDir(r.p), ck.OutputTopic, r.j.cfg.Job.ID, out, r.j.stateDir(r.p), out, r.p)
	}
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
