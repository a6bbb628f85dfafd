package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/dedupstream/dedupstream/job"
)

func cmdMigrate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("migrate", "migrate --config FILE\n\n"+
		"After the raw and output topics were grown to a new partition count N, rebuild the state of the\n"+
		"partitions this instance owns from the window of the whole output topic under N, and record N\n"+
		"with the job's committed offsets. Stop every instance first; run it on every instance.\n"+
		"See docs/scaling.md.", stdout, stderr)
	path := fs.String("config", "", "job config `FILE` (YAML; see configs/reference.yaml)")
	level := logLevelFlag(fs, "")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "dedupstream migrate: want --config FILE and no other arguments")
		fs.Usage()
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, log, ok := loadJob(*path, *level, stderr)
	if !ok {
		return exitUsage
	}
	ms, err := job.Migrate(ctx, cfg, job.Options{Logger: log})
	if err != nil {
		if errors.Is(err, job.ErrTopics) {
			fmt.Fprintf(stderr, "%s: %v\n", *path, err)
			return exitUsage
		}
		fmt.Fprintf(stderr, "dedupstream migrate: %v\n", err)
		return exitFailure
	}
	change := fmt.Sprintf("from unknown to %d partitions", ms.To)
	switch {
	case ms.From == ms.To:
		// The count was recorded already: by an earlier migrate, or by
		// the first instance's in group mode ("from 6 to 6" read as if
		// nothing had changed).
		change = fmt.Sprintf("to %d partitions (already recorded: an earlier migrate or another instance's)", ms.To)
	case ms.From > 0:
		change = fmt.Sprintf("from %d to %d partitions", ms.From, ms.To)
	}
	fmt.Fprintf(stdout, "migrated job %q %s: rebuilt partitions %v from %d output records (%d inserted) and %d unread input records whose keys moved; start the instances now\n",
		cfg.Job.ID, change, ms.Partitions, ms.Read, ms.Restored, ms.Backlog)
	return exitOK
}
