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
	from := "unknown"
	if ms.From > 0 {
		from = fmt.Sprint(ms.From)
	}
	fmt.Fprintf(stdout, "migrated job %q from %s to %d partitions: rebuilt partitions %v from %d output records (%d inserted) and %d unread input records whose keys moved; start the instances now\n",
		cfg.Job.ID, from, ms.To, ms.Partitions, ms.Read, ms.Restored, ms.Backlog)
	return exitOK
}
