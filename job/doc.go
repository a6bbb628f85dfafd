// Package job runs dedupstream between topics: for every partition this
// instance owns, a stage (package pipeline) fed by a read_committed fetcher
// (package fetch) and writing through its own transactional producer
// (package sink), with the recovery protocol that makes the output exactly
// once.
//
// # Layout
//
// In input partitioning mode the raw topics are already keyed by business
// key. Partition p of every raw topic feeds stage p, which writes only to
// partition p of the output topic, so every raw topic and the output topic
// must have the same partition count; Run checks that, that every assigned
// partition exists and that the DLQ topic exists before it starts, and
// refuses to run otherwise (ErrTopics; the CLI exits 2). With several raw
// topics a stage's fetchers take turns, each waiting at most
// commit.interval divided by the number of topics for data. Stage p's
// transactional id is "<job.id>-<p>", its input offsets are committed for
// consumer group "<job.id>", and its state lives in
// "<state.dir>/partition-<p>". The job's partition count is recorded
// with the committed offsets, in each store and in the compacted topic
// "<job.id>-partitions" (created by Run); a start under another count is
// refused until Migrate rebuilt the state (partcount.go, partrecord.go).
// A new job's layout (count, route, output topic) is claimed there as one
// record, and the first claim in the log is in force, so instances
// starting a new job together agree (recordclaim.go). A topic grown while the job runs stops it before any
// record routed under the new count commits: every commit first checks the
// counts (topicguard.go). The output topic is recorded there and with the
// offsets, so a renamed or recreated output is refused (outputcheck.go),
// as is a state directory copied from another partition (stateowner.go).
// A producer outside the stage's transactional id that writes to its output
// partition (an instance under another job.id) stops the job before the
// stage's next commit (otherwriter.go).
// Dead-lettered records of
// stage p go to DLQ partition p modulo the DLQ's partition count.
//
// In repartition mode the raw topics may have any partition counts and
// producers may place records anywhere. A route step reads them and writes
// every record, unchanged, to partition murmur2(business key) mod N of the
// topic "<job.id>-repartition" (created with N partitions, N being the
// output's count, when it does not exist); stage p then reads partition p of
// that topic as above. The route step of raw partition r belongs to stage
// r mod N, so it runs wherever that stage runs, in both assignment modes.
// It writes in transactions with its input offsets (group
// "<job.id>-route", transactional id "<job.id>-route-<topic>-<r>"), so the
// repartition topic holds every raw record once, and records it cannot key
// go to the DLQ from there with their raw source. Across raw partitions
// there is no order, so which of a key's records arriving on different
// raw partitions counts as first is the one routed first.
//
// When the business key is the Kafka key (dedup.key: [key]), every record's
// key is run through the configured input.partitioner; records that arrived
// on another partition are counted (Stats.Misrouted) and logged at most once
// a minute per partition, as a hint to switch to repartition mode.
//
// # Assignment
//
// In assignment mode static the instance owns the configured partitions
// for its whole life; two instances owning one partition fence each other
// (the older one stops with an error).
//
// In assignment mode group the consumer group "<job.id>" (kafka-go's
// ConsumerGroup) assigns partitions in generations. The job's balancer,
// "dedupstream-copartitioned" (package job/balance), assigns partition numbers rather than topic
// partitions, so a member owns partition p of every raw topic or of none,
// and it is sticky: members report the partitions they own and keep them up
// to a fair share (shares differ by at most one), because a partition that
// moves costs its new owner a restore. A generation runs a stage per
// assigned partition; when the group rebalances, each stage commits or
// aborts its open cycle and closes its store (writing its Bloom snapshot),
// and the next generation opens the stages of its partitions again. Input
// offsets are committed with the member id and generation, so the
// coordinator rejects a commit from a member that has been replaced. A
// member whose producers are fenced (it missed its heartbeats, a zombie)
// does not stop: it rejoins the group, and its stages run recovery for
// whatever the next generation gives it.
//
// A partition's state directory stays on disk when the partition moves
// away, so a member that gets it back restores only what was committed in
// the meantime; windows expire old keys either way.
//
// # Delivery guarantees
//
// One commit cycle reads input batches for up to commit.interval (or until
// commit.max_records records; a fetched batch is never split, so a cycle may
// exceed it by one batch), decides them, and produces the emitted records to
// output partition p and the dead-lettered ones to the DLQ inside one Kafka
// transaction. The cycle's next input offsets are added to the same
// transaction (TxnOffsetCommit for group "<job.id>"), then the transaction is
// committed and only then the stage commits the cycle's keys together with a
// checkpoint. Output records, DLQ records and input progress therefore
// become visible to read_committed readers all together or not at all; the
// store is a cache of the committed output.
//
// Output records carry the input record's key, value, headers and
// timestamp unchanged. DLQ records carry them too, plus the headers
// dedupstream.reason (the stable snake_case reason: not_json, field_missing,
// record_too_large, ...), dedupstream.source.topic,
// dedupstream.source.partition and dedupstream.source.offset (decimal).
//
// A bad record never blocks its partition. The DLQ topic's
// max.message.bytes is read at start-up (DescribeConfigs; Kafka's default
// 1048588 is assumed, with a warning, when it cannot be read). A DLQ copy
// that a batch of its own could not carry within it (a 2 MB JSON record the
// raw topic took compressed, a record just under the limit that the headers
// push over) is cut down instead: the four headers above, the key (cut only
// if it alone cannot fit), the source timestamp (kept as the record's
// timestamp and in dedupstream.source.timestamp), as much of the value as
// fits, and dedupstream.truncated naming what was cut (key, value, headers:
// the record's own headers are left out), dedupstream.key.size and
// dedupstream.value.size (the original lengths). Such records are counted in
// dedupstream_dlq_truncated_records_total as well as in
// dedupstream_dlq_records_total.
//
// The output topic's max.message.bytes is read the same way: batches are
// sized to fit the output and the DLQ topics, and a record that could not
// fit the output alone goes to the DLQ as record_too_large, before its key
// is looked up (dedup.max_record_bytes is lowered to it, with a warning
// when the topic takes much less). A limit lowered while the job runs
// stops it at the first batch the brokers refuse, nothing of the cycle
// committed, with an error that says so; the next start reads it again.
//
// Readers must use isolation.level=read_committed. kafka-go's Reader does
// not filter aborted transactions and returns transaction markers as
// messages: it is not a correct reader of the output.
//
// # Recovery
//
// At start, and after any transient or ambiguous failure, stage p runs:
//
//  1. InitProducerID for "<job.id>-<p>": fences any previous owner of the
//     partition (its further writes fail) and settles the transaction it
//     left open.
//  2. OffsetFetch of the group's committed offsets for partition p of every
//     raw topic, with their metadata: the output's end and the generation
//     marks, where in the output the stage clock entered each live
//     generation (marks.go).
//  3. The store's checkpoint: the next output offset it has seen, and a
//     copy of the marks, taken when the offsets carry none (reset with the
//     Kafka tooling, expired) and written back with the next commit
//     (marks.go, storeMarks); for a new store, the first output record of
//     the window (the earlier of the oldest live generation's mark and the
//     first record stamped inside the window). Within a window of a
//     migration a new store first takes the keys that moved to it from the
//     other output partitions' windows (restoremoved.go).
//  4. If that is below the output partition's last stable offset, the
//     committed output from there on is read back read_committed and its
//     keys are put into the store, batch by batch, each batch with its
//     checkpoint, so a crash mid-restore resumes. The next batches are
//     fetched ahead on a goroutine of their own (fetch.ReadRangeAhead)
//     while the reading goroutine keys each batch (pipeline.RestoreKeyer: the records were validated
//     when first keyed, so the key is read without validating the text
//     again) while the stage records the previous one
//     (pipeline.Stage.RestoreKeyed, a bulk load into sorted runs), its
//     clock first moved to the generation of the batch's newest mark.
//     A store ahead of the output (the output topic was recreated) is
//     refused with an error naming the state directory to remove.
//  5. Input resumes at the committed offset; without one (first start, or
//     the group's offsets expired) at the checkpoint's input offset, else at
//     the start of the raw partition.
//
// # Checkpoint
//
// The checkpoint a stage commits is versioned binary (see Checkpoint): a
// version byte, the input offsets (topic, partition, next offset), the
// next output offset, the partition count, the dedup settings, the output
// topic and the generation marks (version 5, only when there are marks).
// A store holding a checkpoint of an unknown version is refused, never
// guessed at: a build before version 5 stops on a store written by a
// later one, so rolling back across it means removing the state
// directories, which the stages restore from the output
// (docs/deploy.md).
//
// # Failure handling
//
//   - Transient (a broker unreachable beyond the fetcher's or producer's own
//     retries, coordinator moves, an ambiguous produce or commit): the open
//     transaction is aborted, the stage forgets the cycle, and after a
//     backoff recovery runs again. Backoff starts at Options.Backoff (1s),
//     doubles up to Options.MaxBackoff (32s) with jitter, and is reset by
//     the next committed cycle. Nothing is skipped.
//   - Fenced: the partition's producer epoch was bumped. sink.FencedError
//     says by whom: another producer initialised the transactional id
//     (another instance owns the partition: in static mode the job stops
//     with an error saying so and does not fight back; in group mode the
//     member rejoins the group, see Assignment), or the transaction
//     coordinator aborted a transaction left open past
//     kafka.transaction_timeout (a broker outage, a stalled process): the
//     stage takes its id back with InitProducerID after
//     kafka.on_fenced_backoff and recovers from the output, as after any
//     restart. An undecided cause follows kafka.on_fenced (fenced.go,
//     docs/outages.md).
//   - Unreachable brokers: each stage's requests go through a watched
//     RoundTripper (links.go), and its producer tells the same link of the
//     produce requests on its own connections (sink.Config.Watch). A stage with a request waiting or failing and
//     no broker answer for kafka.unreachable_after logs one warning, makes
//     /readyz 503 (Job.Readiness) and sets dedupstream_broker_unreachable;
//     when the brokers answer again it logs the outage's length. Requests
//     are bounded by kafka.request_timeout and retried as above.
//   - Corrupt state (statestore.ErrCorrupt, or a checkpoint that does not
//     decode), at open or in a cycle: under state.on_corruption: restore
//     the open cycle is aborted, the store's directory moved aside to
//     "partition-<p>.corrupt-<unix time>", a new store opened and recovery
//     runs again, restoring it as a new store; a partition corrupt 3 times
//     within an hour, or state.on_corruption: fail, stops the job
//     (corrupt.go, docs/outages.md).
//   - Fatal (another state store failure, such as a full or failing disk;
//     an input offset out of range, a broker answer that retrying cannot
//     fix): the job stops with the error.
//   - Shutdown: when Run's context ends, each stage stops fetching, commits
//     the open cycle (bounded by Options.ShutdownTimeout), closes its store
//     and Run returns nil.
//
// # Security
//
// Options.Transport and Options.Dialer default to connections secured as
// kafka.tls and kafka.sasl say, so fetch, transactions, offsets, metadata
// and the consumer group all use them; a broker refusing them stops Run at
// start-up with ErrAuth.
//
// # Files
//
// One concern per file: cycle.go is the cycle driver, the one supervisor
// (recover, run cycles, classify the failure, back off) and the one cycle
// loop (begin; fetch, decide, produce batch by batch; settle), over a small
// task interface that the stage (runner.go) and the route step (route.go)
// implement. prefetch.go reads a task's inputs one batch ahead
// (fetch.ahead): the next fetch is on the wire while a batch is decided
// and produced, the positions a cycle commits are those of the batches
// decided, and an abort drops the batch fetched ahead. A stage keeps up to
// produce.max_in_flight produce requests out (package sink) and adds its
// group to the transaction (AddOffsetsToTxn) while they are, so a cycle's
// round trips overlap; its output offset for the checkpoint is taken
// after the produce requests are flushed. txn.go takes a transactional id over and aborts; group.go runs
// consumer-group generations with the balancer of package job/balance;
// admin.go holds the Kafka admin look-ups (the topic check at start-up, the
// groups' committed offsets); checkpoint.go is the checkpoint codec;
// corrupt.go what a stage does with a corrupt store (state.on_corruption:
// move it aside, restore a new one, stop when it keeps happening);
// records.go turns fetched records into the stage's; metrics.go is the
// Prometheus collector, metrics_stage.go what stages publish to it and
// metrics_hist.go the bulk-filled histogram; memory.go the run's one state
// memory budget (state.memory: a block cache all stores share, in which they
// reserve their indexes of recent keys, sized per assignment), its metrics
// and the GC target of "dedupstream run" (TuneGC). Stats' stage counters have one
// source, the partitions' metrics, which Job.Stats sums. Tests reach into
// a job only through internal/testhook.
//
// # Metrics
//
// Job.Collector exports the job's metrics (see metrics.go for the list and
// README.md for their meaning), most of them per partition. Runners keep
// counters locally during a cycle and publish them once per committed cycle;
// the consumer lag once per fetched batch; the state statistics (Bloom fill,
// store bytes per generation, disk usage) at most every 10 s. The
// end-to-end latency is measured per input record of a committed cycle as
// commit time minus the record timestamp, the cycle latency from the
// cycle's first fetched batch to its state commit.
package job
