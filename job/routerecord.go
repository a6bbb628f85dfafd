package job

import (
	"fmt"
	"slices"
	"strings"
)

// Where a key's records arrive, so which stage and which output partition
// hold it, depends on the route as well as on the partition count: in
// repartition mode the route step's murmur2 of the business key
// (dedup.key), in input mode the producers' partitioner of the Kafka key
// (input.partitioner names it). A store restored from its own output
// partition after the route changed holds the keys routed there under the
// old route, and replays routed under the new one pass as new (measured:
// 1501 repeats of 2000 keys after dedup.key changed in repartition mode,
// on kept and on empty state directories alike; 1509 after input mode
// was switched to repartition). The partitions topic therefore records the
// route next to the partition count (key "route"); Run refuses to start
// under another, and Migrate, which lays every store out under the route
// in force, records the new one.

// routeRecordKey is the key of the partitions topic's record that holds
// the route.
const routeRecordKey = "route"

// routeSettings describes in one canonical line how the configured job's
// keys reach their partitions. Input mode with the business key being the
// Kafka key under murmur2 and repartition mode on the Kafka key route alike.
func (j *Job) routeSettings() string {
	keys := j.cfg.Dedup.Key
	if len(keys) == 0 {
		keys = []string{"key"}
	}
	if j.cfg.Input.Partitioning == "repartition" {
		return "murmur2(" + strings.Join(keys, "+") + ")"
	}
	if j.cfg.Input.Partitioner == "murmur2" && slices.Equal(keys, []string{"key"}) {
		return "murmur2(key)"
	}
	return "input " + j.cfg.Input.Partitioner + "(kafka key)"
}

// checkRouteRecord refuses to start when the partitions topic records
// another route than the config gives. recs holds no route only when the
// job may not use the topic (checkLayoutRecords warned).
func (j *Job) checkRouteRecord(recs jobRecords) error {
	route := j.routeSettings()
	r, ok := recs[routeRecordKey]
	if !ok || string(r.value) == route {
		return nil
	}
	return fmt.Errorf("%w: topic %q records that job %q routes keys by %s, the config (dedup.key, input.partitioning, input.partitioner) routes them by %s: "+
		"keys move to other partitions and their state does not, so repeats would pass. Stop every instance and run "+
		"`dedupstream migrate --config FILE` (it builds each partition's state from the output's window under the new route; see docs/scaling.md), "+
		"restore the previous settings, or start under a new job.id",
		ErrTopics, PartitionsTopic(j.cfg.Job.ID), j.cfg.Job.ID, r.value, route)
}
