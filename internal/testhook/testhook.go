// Package testhook is the seam through which this module's own tests reach
// into a job: failpoints for crash tests, a fault-injecting file system
// under the state stores, how often state metrics refresh. Being internal,
// none of it is part of package job's API.
//
// Package job registers itself here in its init; a test sets hooks on the
// job.Options it passes to job.New:
//
//	opts := job.Options{Logger: log}
//	testhook.Set(&opts, testhook.Hooks{Failpoint: crash})
package testhook

import (
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Failpoint names: the points of a stage where Hooks.Failpoint is called.
const (
	// Produced: a cycle's records are produced, EndTxn not sent.
	Produced = "produced"
	// Committed: the transaction committed, the store commit not yet done.
	Committed = "committed"
	// Restored: one batch was restored from the output; more may follow.
	Restored = "restored"
	// MigrateRead: job.Migrate read one output partition into the stores
	// it rebuilds; more may follow.
	MigrateRead = "migrate-read"
	// Migrated: job.Migrate recorded the new partition count (with the
	// committed offsets and in the partitions topic); the stores it
	// rebuilt are not closed yet.
	Migrated = "migrated"
	// JobRecordMissing: the job's start found a layout record missing in
	// the partitions topic and is about to claim the layout.
	JobRecordMissing = "job-record-missing"
	// JobRecordClaim: the claim of the layout is about to be written
	// (each attempt).
	JobRecordClaim = "job-record-claim"
)

// Hooks are the points a test may take over. The zero value takes none.
type Hooks struct {
	// Failpoint, when set, is called with the failpoint's name each time a
	// stage passes one (from the stage's goroutine).
	Failpoint func(name string)
	// StoreFS, when set, returns the file system of partition p's state
	// store, or nil for the operating system's files; fault tests wrap the
	// real one in pebble's errorfs.
	StoreFS func(p int) vfs.FS
	// StateEvery, when > 0, replaces the 10s interval at which a stage
	// refreshes its state metrics (time.Nanosecond: on every commit).
	StateEvery time.Duration
	// TopicWatchEvery, when > 0, replaces the 30s interval at which a
	// running job reads its topics' partition counts between commits.
	TopicWatchEvery time.Duration
}

var set func(opts any, h Hooks)

// Register is called once by package job with the function that stores
// hooks in a *job.Options.
func Register(f func(opts any, h Hooks)) { set = f }

// Set stores h in opts, which must be a *job.Options; the Job made from
// them calls the hooks.
func Set(opts any, h Hooks) {
	if set == nil {
		panic("testhook: package job is not linked in")
	}
	set(opts, h)
}
