package job

import "github.com/prometheus/client_golang/prometheus"

// Collector returns a Prometheus collector of the job's counters, read from
// Stats at scrape time so the hot path pays nothing. Register it once per
// job with the registry the caller serves.
//
// Counters count committed cycles only, so they agree with what
// read_committed readers see; they are totals over the instance's
// partitions.
func (j *Job) Collector() prometheus.Collector { return (*collector)(j) }

type collector Job

var (
	descIn        = prometheus.NewDesc("dedupstream_records_in_total", "Input records decided in committed cycles.", nil, nil)
	descOut       = prometheus.NewDesc("dedupstream_records_out_total", "Records written to the output topic in committed cycles.", nil, nil)
	descDropped   = prometheus.NewDesc("dedupstream_duplicates_dropped_total", "Duplicates dropped in committed cycles, by reason: batch (repeat inside the commit cycle), history (repeat of an earlier cycle).", []string{"reason"}, nil)
	descDLQ       = prometheus.NewDesc("dedupstream_dlq_records_total", "Records written to the DLQ topic in committed cycles.", nil, nil)
	descBloomNeg  = prometheus.NewDesc("dedupstream_bloom_negatives_total", "Keys the Bloom front found definitely new (no store read).", nil, nil)
	descStoreRead = prometheus.NewDesc("dedupstream_store_reads_total", "Exact store lookups after a Bloom front maybe.", nil, nil)
	descFP        = prometheus.NewDesc("dedupstream_bloom_false_positives_total", "Store lookups that found nothing: Bloom front false positives.", nil, nil)
	descTxn       = prometheus.NewDesc("dedupstream_transactions_total", "Committed Kafka transactions (commit cycles).", nil, nil)
	descRecovery  = prometheus.NewDesc("dedupstream_recoveries_total", "Runs of the recovery protocol, start-up included.", nil, nil)
	descRestored  = prometheus.NewDesc("dedupstream_restored_records_total", "Output records read back into a lagging state store in recovery.", nil, nil)
	descMisroute  = prometheus.NewDesc("dedupstream_misrouted_records_total", "Input records found on another partition than the configured partitioner gives for their key.", nil, nil)
	descReady     = prometheus.NewDesc("dedupstream_ready_stages", "Stages that completed recovery and process input.", nil, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIn, descOut, descDropped, descDLQ, descBloomNeg, descStoreRead, descFP, descTxn, descRecovery, descRestored, descMisroute, descReady} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := (*Job)(c).Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descIn, s.In)
	counter(descOut, s.Emitted)
	counter(descDropped, s.DroppedBatch, "batch")
	counter(descDropped, s.DroppedHistory, "history")
	counter(descDLQ, s.DeadLettered)
	counter(descBloomNeg, s.BloomNegative)
	counter(descStoreRead, s.StoreReads)
	counter(descFP, s.FalsePositives)
	counter(descTxn, s.Cycles)
	counter(descRecovery, s.Recoveries)
	counter(descRestored, s.Restored)
	counter(descMisroute, s.Misrouted)
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, float64(s.Ready))
}

// Ready reports whether an assignment is current and every stage of it has
// completed recovery and is processing input: the /readyz condition.
func (j *Job) Ready() bool {
	s := j.Stats()
	return s.Assignment && s.Ready == s.Assigned
}
