package job

import (
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the job's metrics. Register
// it once per job with the registry the caller serves.
//
// Counters count committed cycles only, so they agree with what
// read_committed readers see. Most metrics carry the stage's partition as
// label "partition"; the runners publish them once per fetched batch (lag)
// or committed cycle (everything else), from counters they keep locally, and
// the collector reads them at scrape time, so the per-record path pays
// nothing. A partition keeps its series after it is no longer run by this
// instance; its gauges then hold their last values.
func (j *Job) Collector() prometheus.Collector { return (*collector)(j) }

type collector Job

// Histogram buckets, in seconds.
var (
	cycleBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	e2eBuckets   = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
)

var (
	lp  = []string{"partition"}
	lpr = []string{"partition", "reason"}
	lpa = []string{"partition", "age"}

	descIn          = prometheus.NewDesc("dedupstream_records_in_total", "Input records decided in committed cycles.", lp, nil)
	descOut         = prometheus.NewDesc("dedupstream_records_out_total", "Records written to the output topic in committed cycles.", lp, nil)
	descDropped     = prometheus.NewDesc("dedupstream_duplicates_dropped_total", "Duplicates dropped in committed cycles, by reason: batch (repeat inside the commit cycle), history (repeat of an earlier cycle).", lpr, nil)
	descDLQ         = prometheus.NewDesc("dedupstream_dlq_records_total", "Records written to the DLQ topic in committed cycles.", lp, nil)
	descRatio       = prometheus.NewDesc("dedupstream_duplicate_ratio", "Duplicates dropped divided by records in, over the committed cycles since this instance started; alert on the rate of the counters instead.", lp, nil)
	descBloomCheck  = prometheus.NewDesc("dedupstream_bloom_checks_total", "Keys tested against the Bloom front (keys not already emitted in the open cycle).", lp, nil)
	descBloomNeg    = prometheus.NewDesc("dedupstream_bloom_negatives_total", "Keys the Bloom front found definitely new (no store read).", lp, nil)
	descFP          = prometheus.NewDesc("dedupstream_bloom_false_positives_total", "Bloom front maybes the exact store did not confirm: false positives.", lp, nil)
	descStoreRead   = prometheus.NewDesc("dedupstream_store_reads_total", "Exact store lookups after a Bloom front maybe.", lp, nil)
	descStoreWrite  = prometheus.NewDesc("dedupstream_store_writes_total", "Keys written to the exact store: emitted records of committed cycles and output records restored in recovery.", lp, nil)
	descTxn         = prometheus.NewDesc("dedupstream_transactions_total", "Committed Kafka transactions (commit cycles).", lp, nil)
	descRestored    = prometheus.NewDesc("dedupstream_restored_records_total", "Output records read back into a lagging state store in recovery.", lp, nil)
	descUnkeyed     = prometheus.NewDesc("dedupstream_restore_unkeyed_records_total", "Output records a restore left out because they have no business key under the current dedup settings (emitted under another dedup.key, or written by another producer).", lp, nil)
	descAmbiguous   = prometheus.NewDesc("dedupstream_ambiguous_commits_total", "Commit cycles whose EndTxn outcome was unknown (request timed out, connection lost), by what recovery found from the committed input offsets: committed, aborted, or timed_out (aborted by the transaction coordinator because the cycle stayed open past kafka.transaction_timeout: the process stood still or the brokers did not answer). Exactly-once holds in every case.", []string{"partition", "outcome"}, nil)
	descCorrupt     = prometheus.NewDesc("dedupstream_state_corruptions_total", "Times the partition's state store was found corrupt (a block failing its checksum, a garbled sstable, MANIFEST or checkpoint record) and, under state.on_corruption: restore, moved aside and restored from the output topic.", lp, nil)
	descMisroute    = prometheus.NewDesc("dedupstream_misrouted_records_total", "Input records found on another partition than the configured partitioner gives for their key.", lp, nil)
	descCycle       = prometheus.NewDesc("dedupstream_cycle_duration_seconds", "Processing latency: from the first fetched batch of a commit cycle to the state commit after its transaction committed; every record of the cycle waited at most this long inside the job.", lp, nil)
	descE2E         = prometheus.NewDesc("dedupstream_end_to_end_latency_seconds", "Per input record of a committed cycle: commit time minus the record timestamp (create time, or the broker's append time on LogAppendTime topics; records without a timestamp are left out); replays of old records land in the top buckets.", lp, nil)
	descLag         = prometheus.NewDesc("dedupstream_consumer_lag_records", "Last stable offset of the raw partition (from the latest fetch response) minus the committed input offset.", []string{"topic", "partition"}, nil)
	descStateKeys   = prometheus.NewDesc("dedupstream_state_keys", "Keys added to each live generation (age 0 is the current one), from the Bloom front's counts; keys of aborted cycles count too.", lpa, nil)
	descStateBytes  = prometheus.NewDesc("dedupstream_state_bytes", "Estimated on-disk bytes of each live generation's store bucket (keys still in the memtable count 0).", lpa, nil)
	descDisk        = prometheus.NewDesc("dedupstream_state_disk_bytes", "Bytes the partition's Pebble store occupies on disk.", lp, nil)
	descGen         = prometheus.NewDesc("dedupstream_window_generation", "The stage's current window generation number.", lp, nil)
	descFill        = prometheus.NewDesc("dedupstream_bloom_fill_ratio", "Fraction of bits set in each live generation's Bloom sub-filters.", lpa, nil)
	descGenFPR      = prometheus.NewDesc("dedupstream_bloom_generation_false_positive_rate", "Probability, estimated from the bits set, that each live generation reports an absent key as maybe present; growth keeps it below about 1.35x dedup.false_positive_rate / live generations.", lpa, nil)
	descSubFilters  = prometheus.NewDesc("dedupstream_bloom_subfilters", "Bloom sub-filters of each live generation: 1, plus one each time the generation filled up (it received more keys than dedup.expected_keys sized it for).", lpa, nil)
	descFPR         = prometheus.NewDesc("dedupstream_bloom_estimated_false_positive_rate", "Probability, estimated from the bits set, that the Bloom front reports an absent key as maybe present.", lp, nil)
	descRestoreLeft = prometheus.NewDesc("dedupstream_restore_remaining_records", "Output offsets still to read back in the running restore; 0 when none runs.", lp, nil)
	descRestoreDone = prometheus.NewDesc("dedupstream_restore_progress_ratio", "Progress of the latest restore from the output, 0 to 1 (1 once the restored keys are durable in the store, or when none was needed; at most 0.99 before).", lp, nil)
	descRecovery    = prometheus.NewDesc("dedupstream_recoveries_total", "Runs of the recovery protocol, start-up included, over all partitions.", nil, nil)
	descReady       = prometheus.NewDesc("dedupstream_ready_stages", "Stages that completed recovery and process input.", nil, nil)
	descAssigned    = prometheus.NewDesc("dedupstream_assigned_partitions", "Partitions this instance owns now (group mode: in the current generation, 0 between generations).", nil, nil)
	descGenerations = prometheus.NewDesc("dedupstream_group_generations_total", "Consumer group generations this instance joined (group mode): one per rebalance it took part in.", nil, nil)
	descRouteIn     = prometheus.NewDesc("dedupstream_route_records_in_total", "Raw records the route step of repartition mode read in committed cycles.", nil, nil)
	descRouted      = prometheus.NewDesc("dedupstream_route_records_out_total", "Raw records the route step wrote to the repartition topic in committed cycles (the others went to the DLQ).", nil, nil)
	descDLQCut      = prometheus.NewDesc("dedupstream_dlq_truncated_records_total", "DLQ records (counted in dedupstream_dlq_records_total too) cut down to fit the DLQ topic's max.message.bytes: value truncated or left out, see the dedupstream.truncated header.", nil, nil)
	descBuild       = prometheus.NewDesc("dedupstream_build_info", "Always 1; labels name the build.", []string{"version", "goversion", "revision"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIn, descOut, descDropped, descDLQ, descRatio, descBloomCheck, descBloomNeg, descFP,
		descStoreRead, descStoreWrite, descTxn, descRestored, descUnkeyed, descAmbiguous, descCorrupt, descMisroute, descCycle, descE2E, descLag, descStateKeys,
		descStateBytes, descDisk, descGen, descFill, descGenFPR, descSubFilters, descFPR, descRestoreLeft, descRestoreDone, descRecovery, descReady,
		descAssigned, descGenerations, descRouteIn, descRouted, descDLQCut, descSkipped} {
		ch <- d
	}
	for _, d := range memoryDescs {
		ch <- d
	}
	(*Job)(c).links.describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	j := (*Job)(c)
	j.links.collect(ch)
	s := j.Stats()
	ch <- prometheus.MustNewConstMetric(descRecovery, prometheus.CounterValue, float64(s.Recoveries))
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, float64(s.Ready))
	ch <- prometheus.MustNewConstMetric(descAssigned, prometheus.GaugeValue, float64(s.Assigned))
	ch <- prometheus.MustNewConstMetric(descGenerations, prometheus.CounterValue, float64(s.Generations))
	ch <- prometheus.MustNewConstMetric(descRouteIn, prometheus.CounterValue, float64(s.RouteIn))
	ch <- prometheus.MustNewConstMetric(descRouted, prometheus.CounterValue, float64(s.Routed))
	ch <- prometheus.MustNewConstMetric(descDLQCut, prometheus.CounterValue, float64(s.DLQTruncated))
	j.collectMemory(ch)
	j.collectSkipped(ch)
	j.mu.Lock()
	parts := make([]*partMetrics, 0, len(j.parts))
	for _, pm := range j.parts {
		parts = append(parts, pm)
	}
	j.mu.Unlock()
	slices.SortFunc(parts, func(a, b *partMetrics) int { return a.p - b.p })
	for _, pm := range parts {
		pm.collect(ch, j.topics)
	}
}

func (pm *partMetrics) collect(ch chan<- prometheus.Metric, topics []string) {
	for i, t := range topics {
		if lag := pm.lag[i].Load(); lag >= 0 {
			ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(lag), t, pm.label)
		}
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	c := &pm.counts
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{pm.label}, labels...)...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{pm.label}, labels...)...)
	}
	counter(descIn, c.In)
	counter(descOut, c.Emitted)
	counter(descDropped, c.DroppedBatch, "batch")
	counter(descDropped, c.DroppedHistory, "history")
	counter(descDLQ, c.DeadLettered)
	ratio := 0.0
	if c.In > 0 {
		ratio = float64(c.DroppedBatch+c.DroppedHistory) / float64(c.In)
	}
	gauge(descRatio, ratio)
	counter(descBloomCheck, c.BloomNegative+c.StoreReads)
	counter(descBloomNeg, c.BloomNegative)
	counter(descFP, c.FalsePositives)
	counter(descStoreRead, c.StoreReads)
	counter(descStoreWrite, pm.storeWrites)
	counter(descTxn, pm.cycles)
	counter(descRestored, pm.restored)
	counter(descUnkeyed, pm.unkeyed)
	counter(descMisroute, pm.misrouted)
	counter(descCorrupt, pm.corruptions)
	for i, v := range pm.ambiguous {
		counter(descAmbiguous, v, ambiguousLabels[i])
	}
	ch <- pm.cycle.metric(descCycle, pm.label)
	ch <- pm.e2e.metric(descE2E, pm.label)
	gauge(descRestoreLeft, float64(pm.restoreLeft))
	gauge(descRestoreDone, pm.restoreFrac)
	if st := &pm.state; st.valid {
		gauge(descGen, float64(st.generation))
		gauge(descDisk, float64(st.disk))
		gauge(descFPR, st.fpr)
		gauge(descBloomMemory, float64(st.bloom))
		for age := range st.keys {
			a := strconv.Itoa(age)
			gauge(descStateKeys, float64(st.keys[age]), a)
			gauge(descStateBytes, float64(st.bytes[age]), a)
			gauge(descFill, st.fill[age], a)
			gauge(descGenFPR, st.genFPR[age], a)
			gauge(descSubFilters, float64(st.subs[age]), a)
		}
	}
}

// NewBuildInfo returns the collector of dedupstream_build_info for the
// given version string; the Go version and VCS revision come from the
// binary's build information.
func NewBuildInfo(version string) prometheus.Collector {
	rev := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				rev = s.Value
			}
		}
	}
	return buildInfo{prometheus.MustNewConstMetric(descBuild, prometheus.GaugeValue, 1, version, runtime.Version(), rev)}
}

type buildInfo struct{ m prometheus.Metric }

func (b buildInfo) Describe(ch chan<- *prometheus.Desc) { ch <- descBuild }
func (b buildInfo) Collect(ch chan<- prometheus.Metric) { ch <- b.m }
