package job

import (
	"context"
	"strconv"
	"time"
)

// A store that starts empty (a new instance, a moved partition, a deleted
// state directory, a store dropped for other dedup settings) learns the
// window's keys from the output topic alone. Output records deleted by
// retention cannot be restored: replays of their keys would pass as new
// while the window still covers them. checkOutputRetention says so at
// start when the output topic's retention.ms is shorter than the longest a
// key is remembered (window + window/generations).
func (j *Job) checkOutputRetention(ctx context.Context) {
	topic := j.cfg.Output.Topic
	v, err := j.describeTopicConfig(ctx, topic, "retention.ms")
	if err != nil {
		j.log.Warn("cannot read the output topic's retention.ms; a store restored from the output covers only what retention kept",
			"topic", topic, "err", err)
		return
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 {
		return // -1: kept for ever
	}
	retention := time.Duration(ms) * time.Millisecond
	pc := j.pc
	pc.ApplyDefaults()
	remembered := pc.Window + pc.Window/time.Duration(pc.Generations)
	if retention >= remembered {
		return
	}
	j.log.Warn("the output topic's retention is shorter than the dedup window: a store restored from the output (new instance, moved partition, deleted state directory) cannot learn keys older than the retention, and their replays would pass",
		"topic", topic, "retention", retention, "window", pc.Window, "remembered", remembered,
		"fix", "set the output topic's retention.ms to at least "+strconv.FormatInt(remembered.Milliseconds(), 10))
}
