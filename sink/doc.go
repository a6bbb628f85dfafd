// Package sink writes a stage's output to Kafka exactly once, with Kafka
// transactions, on top of kafka-go's low-level transport.
//
// kafka-go's Writer has no idempotent or transactional mode and encodes
// producer id, epoch and sequence as -1. This package supplies what is
// missing: its own record batch v2 encoder (Encoder.AppendBatch) and a
// transactional Producer that drives the transaction protocol with the
// request types of github.com/segmentio/kafka-go/protocol over a shared
// kafka.Transport.
//
// # Per-cycle protocol
//
// One Producer per stage, with transactional id "<job.id>-<p>":
//
//	Init            FindCoordinator(transaction) once, cached;
//	                InitProducerID{id, timeout, -1, -1}: fences the previous
//	                owner, aborts what it left open; sequences restart at 0
//	per commit cycle:
//	Begin           local
//	Produce         AddPartitionsToTxn once per partition per transaction
//	                (output p, the DLQ partition when used), then RawProduce
//	                of our record batches (transactional bit, producer id,
//	                epoch, base sequence, CRC-32C) to the partition leader,
//	                acks=all, up to MaxInFlight requests at a time
//	Flush           waits for the produce requests in flight
//	AddOffsetsEarly optional: AddOffsetsToTxn(group) sent while the
//	                produce requests are out (the job sends it after a
//	                cycle's first produce), answer taken by the next
//	                coordinator request
//	SendOffsets     AddOffsetsToTxn(group) once per transaction, then
//	                TxnOffsetCommit(input offsets; generation and member id
//	                in group mode) to the group coordinator, cached
//	Commit          EndTxn(commit)
//	Abort           EndTxn(abort); after an ambiguous error (or a failed
//	                EndTxn) InitProducerID{id, timeout, pid, epoch} instead
//
// Coordinators and partition leaders are cached and looked up again only
// after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, leader errors or a
// network error; leaders come from a fresh Metadata request, not from the
// transport's periodically refreshed cache.
//
// Sequence numbers run per partition for one producer id and epoch: they
// continue across the transactions of an epoch, restart at 0 after Init,
// and advance only after a successful produce (with MaxInFlight > 1: are
// given out at send time and set back to the first batch not stored when
// the window fails). A batch whose produce failed is resent byte for byte
// with the same sequence, so a retry of a batch the broker already stored
// is deduplicated (the broker answers with the original offset).
//
// # Requests in flight
//
// With MaxInFlight > 1 (at most 5, the batches a broker remembers per
// producer and partition) Produce does not wait for each answer: batches
// carry consecutive sequences and the broker stores them in sequence order
// only. Answers are taken in send order; when one is not a success, every
// request still out is waited for and that batch and every later one that
// did not succeed are resent one at a time, in order, so nothing is stored
// out of order or twice. See inflight.go.
//
// # Produce connections
//
// With Config.Dialer set (the job always sets it, with the TLS and SASL of
// its Transport: DialerFor) produce requests go on the producer's own
// connection to each leader (pipe.go): written back to back in sequence
// order, answers read in order and matched by correlation id. A broker
// reads a connection's next request only after answering the previous one,
// so the batches of a window reach the log in sequence order and none is
// refused as out of sequence; the network round trips overlap. When the
// connection breaks (lost, cut, an answer missing past RequestTimeout or
// out of order) every request out on it has an unknown outcome and the
// window's rules apply: resent in order on a new connection, or the
// transaction ends ambiguous. Metadata and coordinator requests stay on
// the Transport. Config.Watch hears of each request on these connections
// (sent, then answered, failed or given up), as a RoundTripper wrapped
// around the Transport would: the job's link watch counts them.
//
// Without a Dialer produce requests go through kafka.Transport, which
// serves one request per connection at a time: requests in flight then
// travel on separate connections and a later batch may reach the broker
// first; it is refused as out of sequence and resent like any other.
//
// # Delivery guarantees
//
// Records produced in a transaction, and the offsets sent with it, become
// visible to read_committed consumers together when Commit returns nil, and
// never if the transaction aborts. Under retries and lost responses no
// record is stored twice within a transaction. Errors say what the caller
// must do (see Class):
//
//   - retriable: transient broker conditions (CONCURRENT_TRANSACTIONS after
//     the previous EndTxn, coordinator moves or loading, leader changes) are
//     retried inside the call with exponential backoff and jitter; the error
//     is returned only when RetryTimeout is spent. Abort and run the cycle
//     again. AddPartitionsToTxn and AddOffsetsToTxn refused with
//     CONCURRENT_TRANSACTIONS (the previous transaction's markers are still
//     being written, which the next cycle's first request meets almost every
//     time) are polled every Config.PendingEndPoll instead, so the wait ends
//     within a poll of the markers.
//   - fenced: errors.Is(err, ErrFenced). A newer producer owns the
//     transactional id, or the consumer group moved on to a new generation.
//     The stage must stop writing. A bumped producer epoch comes as a
//     *FencedError whose Cause says who bumped it: another producer
//     (FenceTakenOver), or the coordinator aborting a transaction that
//     outlived the transaction timeout (FenceTimedOut: nobody else holds
//     the id, so Init may take it back), told apart by how long our
//     transaction had been open and, past the timeout, by
//     DescribeTransactions; FenceUndecided when neither tells.
//   - ambiguous: *AmbiguousError. A produce whose retries ran out after a
//     timeout or broken connection, any EndTxn whose answer was lost, or a
//     broker that disagrees with our sequence or producer state. Whether the
//     transaction's records are in the log is unknown. Call Abort, which
//     bumps the epoch with InitProducerID(pid, epoch): that fences every
//     request still in flight and the coordinator settles the transaction,
//     committed or aborted, never both and never twice (and a producer
//     that was replaced meanwhile gets ErrFenced rather than taking the id
//     back). Then re-run recovery from the output topic, which is the
//     source of truth.
//   - fatal: configuration, authorization or oversize records. Stop.
//
// Commit returning nil is the only proof of commit; the job must update its
// state store only after it.
//
// kafka-go's Reader does not filter aborted transactions and returns
// transaction markers as messages; read the output with a read_committed
// reader.
//
// # Concurrency
//
// A Producer is driven by one goroutine. Producers of several stages may
// run concurrently on one kafka.Transport, which multiplexes their requests.
// Each producer has its own produce connections (a broker handles one
// request of a connection at a time, so stages sharing one would wait for
// each other's replication); Close closes them.
package sink
