package job

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/statestore"
)

// A stage's store is a cache of its output partition (doc.go, "Recovery"),
// so a store whose files fail their checks (statestore.ErrCorrupt: a block
// failing its checksum, a garbled sstable or MANIFEST, a state or run
// record that does not decode; or a checkpoint that does not decode) is
// rebuilt from the output rather than refused: refusing it stopped the job
// at every restart on the same files, a restart loop only an operator
// removing the directory ended. Under state.on_corruption: restore (the
// default) the stage closes the store, moves its directory aside to
// "<state.dir>/partition-<p>.corrupt-<unix seconds>" for forensics, opens
// a new store there and runs its recovery, which restores a new store from
// the output's window exactly as after a lost directory: the same marks
// (committed with the offsets; an empty checkpoint has none of its own),
// the same keys moved by a migration (restoremoved.go). A cycle that met
// the corruption before its transaction committed was aborted; one that
// met it in the store commit after, committed, and the restore reads it
// back. Either way the input is read again from the committed offsets.
//
// Faults of the disk itself (ENOSPC, EIO, a permission denied) are not
// corruption: they may pass and the files are sound, so they stop the job
// as before. A disk that keeps corrupting what is written on it would make
// the stage restore over and over: after corruptLimit corruptions of a
// partition within corruptPeriod (counted from the directories moved
// aside, so restarts count too) the stage stops with the error instead and
// leaves the directory in place. The newest corruptKeep directories moved
// aside are kept; older ones are removed, each with a log line.
//
// The directories moved aside confuse nothing that looks for state: the
// stage's directory, its ".migrating" mark (statedir.go) and inspect all
// name "partition-<p>" exactly, the partition count and the state owner are
// read from the new store's checkpoint (empty until its first commit), and
// the partition count the job runs under is recorded in Kafka
// (partrecord.go), not on the disk.

const (
	corruptLimit  = 3         // corruptions of a partition within corruptPeriod that stop the stage
	corruptPeriod = time.Hour // see corruptLimit
	corruptKeep   = 3         // directories moved aside kept per partition
)

// isCorrupt reports whether err says that the stage's store is corrupt:
// its files fail their checks, or its checkpoint does not decode (a newer
// build's checkpoint is sound: it is not corrupt).
func isCorrupt(err error) bool {
	return errors.Is(err, statestore.ErrCorrupt) ||
		errors.Is(err, errCheckpoint) && !errors.Is(err, errCheckpointNewer)
}

// onCorrupt applies state.on_corruption to the store a cycle or a
// recovery found corrupt: moves it aside and opens a new one, which the
// next recovery restores; or returns the error to stop with.
func (r *runner) onCorrupt(err error) error {
	if err := r.moveCorrupt(err); err != nil {
		return err
	}
	return r.stuckCorrupt(r.openStage())
}

// stuckCorrupt explains err, the failure of the open after a corrupt store
// was moved aside, when the store's directory lock was still held: the
// corrupt store could not be closed (a goroutine of it stuck in Pebble:
// statestore.Store.Close releases only a store fatal through corruption
// alone), and Pebble's lock is per path and process. A restart of the
// process opens the new store.
func (r *runner) stuckCorrupt(err error) error {
	if !errors.Is(err, statestore.ErrLocked) {
		return err
	}
	return fatalf("the corrupt store was moved aside but could not be closed in this process, so no new store opens in its place: %w; "+
		"restart the process: the new store then restores from output %s/%d", err, r.j.cfg.Output.Topic, r.p)
}

// moveCorrupt closes the stage's corrupt store (cause says how it was
// found) and moves its directory aside, unless state.on_corruption is fail
// or the partition's store was corrupt corruptLimit times within
// corruptPeriod: it then returns the error to stop with and leaves the
// store open and in place for the caller's Close. Otherwise it leaves
// r.stage nil.
func (r *runner) moveCorrupt(cause error) error {
	root, dir := r.j.cfg.State.Dir, r.j.stateDir(r.p)
	if r.j.cfg.State.OnCorruption == "fail" {
		return fatalf("state %s is corrupt (state.on_corruption: fail): %w; remove the directory (the stage then restores it "+
			"from output %s/%d), or set state.on_corruption: restore", dir, cause, r.j.cfg.Output.Topic, r.p)
	}
	now := time.Now()
	aside, err := corruptDirs(root, r.p)
	if err != nil {
		return fatalf("state %s is corrupt: %w; listing the directories moved aside before: %w", dir, cause, err)
	}
	var recent []string
	for _, d := range aside {
		if now.Sub(d.at) < corruptPeriod {
			recent = append(recent, d.path)
		}
	}
	if len(recent) >= corruptLimit {
		return fatalf("state %s is corrupt: %w; it was found corrupt and restored %d times within %s before (%s): "+
			"the disk or the machine is failing; the directory is left as it is", dir, cause, len(recent), corruptPeriod,
			strings.Join(recent, ", "))
	}
	if r.stage != nil {
		// Its error is the corruption; a store it could not let go of
		// makes the new one's open fail (statestore.ErrLocked).
		_ = r.stage.Close()
		r.stage = nil
	}
	to, err := moveAside(dir, now)
	if err != nil {
		return fatalf("state %s is corrupt: %w; moving it aside: %w", dir, cause, err)
	}
	r.met.corrupt()
	r.log.Error("the state store is corrupt: moved it aside; the stage restores a new store from the output topic (state.on_corruption: restore)",
		"dir", dir, "moved_to", to, "err", cause)
	if len(aside) >= corruptKeep {
		for _, d := range aside[:len(aside)-corruptKeep+1] {
			if err := os.RemoveAll(d.path); err != nil {
				r.log.Warn("removing an old corrupt state directory failed", "dir", d.path, "err", err)
				continue
			}
			r.log.Warn("removed an old corrupt state directory", "dir", d.path, "kept", corruptKeep)
		}
	}
	return nil
}

// movedDir is a state directory moved aside as corrupt, and when.
type movedDir struct {
	path string
	at   time.Time
}

// corruptDirs lists partition p's state directories moved aside under
// root, oldest first.
func corruptDirs(root string, p int) ([]movedDir, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(StateDir(root, p)) + ".corrupt-"
	var out []movedDir
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		if sec, err := strconv.ParseInt(s, 10, 64); err == nil {
			out = append(out, movedDir{filepath.Join(root, e.Name()), time.Unix(sec, 0)})
		}
	}
	slices.SortFunc(out, func(a, b movedDir) int { return a.at.Compare(b.at) })
	return out, nil
}

// moveAside renames dir to "<dir>.corrupt-<unix seconds>" (a later second
// when that name is taken), durably, and returns the new name.
func moveAside(dir string, now time.Time) (string, error) {
	for sec := now.Unix(); ; sec++ {
		to := dir + ".corrupt-" + strconv.FormatInt(sec, 10)
		if _, err := os.Lstat(to); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if err := os.Rename(dir, to); err != nil {
			return "", err
		}
		return to, syncDir(filepath.Dir(dir))
	}
}
