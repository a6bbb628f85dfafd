package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go"
)

// The partitions topic (partrecord.go) guards the layout only while the
// brokers keep its records. The job creates it compacted, which keeps the
// last record of every key for good, and the fold of the layout needs no
// more (TestFoldSurvivesCompaction). A topic that exists before the job
// first starts (created by hand, or by a provisioning tool whose default is
// cleanup.policy=delete) deletes them after retention.ms, 7 days by
// default: a start after that finds no layout and claims the one it is
// given, so topics grown meanwhile, or a changed route, pass without
// migrate and their repeats with them, and a store that starts empty no
// longer finds the ends of the last migration ("moved", restoremoved.go).
//
// So before the job reads or writes its layout (Run and Migrate) it reads
// the topic's cleanup.policy, retention.ms and retention.bytes, and
// refuses (ErrTopics, exit 2) when retention may delete a record: "delete"
// in the policy, alone or as "compact,delete", with a finite retention.ms
// or retention.bytes. Under "compact" alone Kafka applies no retention, so
// a retention.ms there is harmless, as are min.compaction.lag.ms and the
// segment settings.
//
// It refuses instead of altering the topic. Records may already be gone,
// and a start that quietly made the topic compacted would then claim the
// layout it was given over the one the job ran under: the very loss the
// check exists to show. The policy may also be someone's deliberate
// choice, or the job may lack the right to alter configs. The message
// names the command that fixes it and what to check before starting again.

// partitionsTopicSettings are the topic configs that decide whether
// retention may delete the partitions topic's records.
var partitionsTopicSettings = []string{"cleanup.policy", "retention.ms", "retention.bytes"}

// retentionDeletes returns the settings of cfgs (partitionsTopicSettings'
// values) under which retention may delete records, as "name=value"
// joined by ", "; "" when it may not.
func retentionDeletes(cfgs map[string]string) string {
	policy := cfgs["cleanup.policy"]
	if !slices.Contains(strings.Split(strings.ReplaceAll(policy, " ", ""), ","), "delete") {
		return ""
	}
	limits := []string{"cleanup.policy=" + policy}
	for _, name := range []string{"retention.ms", "retention.bytes"} {
		// A value that does not parse is taken as a limit: the brokers
		// would not have accepted it, so it is not "never".
		if n, err := strconv.ParseInt(cfgs[name], 10, 64); err != nil || n >= 0 {
			limits = append(limits, name+"="+cfgs[name])
		}
	}
	if len(limits) == 1 {
		return "" // -1 and -1: kept for ever
	}
	return strings.Join(limits, ", ")
}

// checkPartitionsTopicConfig refuses the partitions topic when retention
// may delete its records. A topic that does not exist passes (the job
// creates it compacted); so does one whose configs the brokers do not show
// the job, with a warning.
func (j *Job) checkPartitionsTopicConfig(ctx context.Context) error {
	topic := PartitionsTopic(j.cfg.Job.ID)
	var cfgs map[string]string
	err := j.retryAdmin(ctx, "read the configs of topic "+topic, func() error {
		var err error
		cfgs, err = j.describeTopicConfigs(ctx, topic, partitionsTopicSettings...)
		if errors.Is(err, kafka.UnknownTopicOrPartition) {
			cfgs, err = nil, nil
		}
		return err
	})
	_, known := cfgs["cleanup.policy"]
	switch {
	case errors.Is(err, errPartitionsTopicRefused) || err == nil && cfgs != nil && !known:
		j.log.Warn("cannot read the cleanup.policy of the job's layout topic: if retention deletes its records, a changed partition count or route passes once they are gone",
			"topic", topic, "err", err, "fix", "let the job describe this topic's configs, or make sure it has cleanup.policy=compact")
		return nil
	case err != nil || cfgs == nil:
		return err
	}
	deletes := retentionDeletes(cfgs)
	if deletes == "" {
		return nil
	}
	return fmt.Errorf("%w: job.id: topic %q, where job %q records its partition count, route and output topic, has %s: retention deletes those records, "+
		"and a start after that takes a changed partition count or route for the one the job ran under, so repeats would pass. "+
		"Make it compacted: kafka-configs --bootstrap-server BROKER --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact; "+
		"if records were deleted already, the next start records the layout it is started with: check first that the topics' partition count and the route are those the job ran under (docs/scaling.md)",
		ErrTopics, topic, j.cfg.Job.ID, deletes, topic)
}
