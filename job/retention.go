package job

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/partition"
)

// A store that starts empty (a new instance, a moved partition, a deleted
// state directory, a store dropped for other dedup settings) learns the
// window's keys from the output topic alone. Output records deleted by
// retention cannot be restored: replays of their keys would pass as new
// while the window still covers them. checkOutputRetention says so at
// start when the output topic's retention.ms is shorter than the longest a
// key is remembered (window + window/generations), under a cleanup.policy
// that applies it (delete, alone or with compact).
//
// Compaction deletes them too: it keeps the last record of each Kafka key,
// and the output's records keep their input's Kafka keys. Where the
// business key is not the Kafka key (dedup.key names a JSON member or a
// header, as in repartition mode), records of many business keys share one
// Kafka key, and a compacted output keeps one of them: a store restored
// from it missed the others and their replays passed
// (TestOutputCompactionWarning). So a compacted output topic is warned of
// too, unless the business key is the Kafka key alone (then compaction
// removes only a key's records emitted in earlier windows).

// checkOutputRetention warns when retention or compaction of the output
// topic may delete records a restore needs.
func (j *Job) checkOutputRetention(ctx context.Context) {
	topic := j.cfg.Output.Topic
	cfgs, err := j.describeTopicConfigs(ctx, topic, "cleanup.policy", "retention.ms")
	v, ok := cfgs["retention.ms"]
	if err == nil && !ok {
		err = errMissingRetention
	}
	if err != nil {
		j.log.Warn("cannot read the output topic's retention.ms; a store restored from the output covers only what retention kept",
			"topic", topic, "err", err)
		return
	}
	policy := strings.Split(strings.ReplaceAll(cfgs["cleanup.policy"], " ", ""), ",")
	if slices.Contains(policy, "compact") && !j.keyedByKafkaKey() {
		j.log.Warn("the output topic is compacted and the business key is not the Kafka key: compaction keeps one record per Kafka key, so a store restored from the output (new instance, moved partition, deleted state directory) misses the business keys of the records it removed, and their replays would pass",
			"topic", topic, "cleanup.policy", cfgs["cleanup.policy"], "dedup.key", j.routeSettings(),
			"fix", "set the output topic's cleanup.policy to delete, with retention.ms at least the dedup window")
	}
	if _, set := cfgs["cleanup.policy"]; set && !slices.Contains(policy, "delete") {
		return // retention.ms does not apply
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

// errMissingRetention: the brokers' answer lacks retention.ms.
var errMissingRetention = errors.New("retention.ms missing from the answer")

// keyedByKafkaKey reports whether the business key is the record's Kafka
// key alone.
func (j *Job) keyedByKafkaKey() bool {
	keys := j.pc.Key
	return len(keys) == 0 || len(keys) == 1 && keys[0].Source == partition.SourceKey
}
