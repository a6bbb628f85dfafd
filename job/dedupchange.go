package job

import (
	"fmt"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/pipeline"
)

// A store answers in the terms of the dedup settings its keys were written
// under: which business key was hashed (dedup.key), what is kept per key
// (dedup.mode, dedup.version) and what a generation number means (the span
// dedup.window / dedup.generations: a key's generation is its time divided
// by the span). Under other settings the same store is wrong, not merely
// stale: a shorter span reads every stored generation as long expired and
// drops them all, another key never matches what the store holds. The
// clock (dedup.time_base) belongs to the span's meaning too: with record
// timestamps behind the wall clock (a backlog, producers stamping event
// time) the two clocks put the same keys in generations hours apart, so a
// store of record time read on the wall clock expires at once (replays
// pass) and one of the wall clock read on record time holds its keys until
// record time catches up (later records of the keys are dropped). Every
// checkpoint therefore records the settings (Checkpoint.Dedup), and a store
// whose checkpoint names others is removed when its stage opens; the
// stage's recovery then restores it from the output's window, keyed and
// bucketed under the settings now in force, as for a new instance.

// dedupSettings describes the settings of pc that decide what a store
// holds, in one canonical line.
func dedupSettings(pc pipeline.Config) string {
	pc.ApplyDefaults()
	keys := make([]string, len(pc.Key))
	for i, f := range pc.Key {
		keys[i] = f.String()
	}
	if len(keys) == 0 {
		keys = []string{"key"}
	}
	s := fmt.Sprintf("key=%s mode=%s span=%s", strings.Join(keys, "+"), pc.Mode, pc.Window/time.Duration(pc.Generations))
	if pc.Mode == pipeline.ModeVersion {
		s += " version=" + pc.Version.String()
	}
	// Only when not the default, so that the stores of record time written
	// before it was recorded are kept.
	if pc.TimeBase != pipeline.RecordTime {
		s += " time=" + pc.TimeBase.String()
	}
	return s
}

// dropStateOfOtherSettings removes the opened store when its checkpoint
// records other dedup settings than the job's, and opens an empty one in
// its place. A store of another partition count is left for
// checkOpenedState to refuse; a checkpoint without settings (an older
// build's) is kept, and the next commit records them.
func (r *runner) dropStateOfOtherSettings() error {
	ck, err := DecodeCheckpoint(r.stage.State().Checkpoint)
	if err != nil || ck.Dedup == "" || ck.Dedup == r.j.dedup ||
		ck.Partitions != 0 && ck.Partitions != r.lay.partitions {
		return nil
	}
	dir := r.j.stateDir(r.p)
	r.log.Warn("the state was written under other dedup settings: removing it; the recovery restores it from the output's window",
		"dir", dir, "state_settings", ck.Dedup, "config_settings", r.j.dedup)
	if err := r.stage.Close(); err != nil {
		return fmt.Errorf("partition %d: close state %s: %w", r.p, dir, err)
	}
	r.stage = nil
	if err := pipeline.RemoveState(dir); err != nil {
		return fmt.Errorf("partition %d: remove state %s written under other dedup settings: %w", r.p, dir, err)
	}
	r.j.addStats(func(s *Stats) { s.StatesDropped++ })
	return r.openStage()
}
