package job

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// StateDir is the directory of partition p's stage under the config's
// state.dir: "<state.dir>/partition-<p>". Tools such as inspect find the
// stages there.
func StateDir(root string, p int) string {
	return filepath.Join(root, fmt.Sprintf("partition-%d", p))
}

// A dedupstream migrate removes each state directory it rebuilds and fills
// it again from the whole output; until the rebuilt store is durable, a
// file beside the directory, "<state.dir>/partition-<p>.migrating", says
// so. A start refuses a state directory with that file: a migrate killed
// or failed half-way leaves a store without a checkpoint (or none), which a
// start would take for a new one and restore from its own output partition
// only, without the keys that moved there under the new count or route,
// whose replays would pass. That start is accepted once another instance's
// migrate recorded the new count (TestMigrateInterrupted). The file lies
// beside the directory, not in it, so that a kill while migrate removes
// the directory leaves it too.

// migratingFile is partition p's migrate mark under root (state.dir).
func migratingFile(root string, p int) string {
	return StateDir(root, p) + ".migrating"
}

// markMigrating writes partition p's migrate mark, durably.
func markMigrating(root string, p int) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	path := migratingFile(root, p)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "dedupstream migrate is rebuilding %s; a start refuses it until a migrate finishes\n", StateDir(root, p))
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		return err
	}
	return syncDir(root)
}

// unmarkMigrating removes partition p's migrate mark, durably.
func unmarkMigrating(root string, p int) error {
	if err := os.Remove(migratingFile(root, p)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(root)
}

// checkNotMigrating refuses partition p's state while its migrate mark is
// there.
func checkNotMigrating(root string, p int) error {
	path := migratingFile(root, p)
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fatalf("state %s: %w", StateDir(root, p), err)
	}
	return fatalf("%w: state %s: a dedupstream migrate began rebuilding it and did not finish (%s is there): "+
		"run `dedupstream migrate --config FILE` again with every instance stopped (see docs/scaling.md)",
		ErrTopics, StateDir(root, p), path)
}

// syncDir makes the entries of dir durable (a file created or removed in
// it).
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
