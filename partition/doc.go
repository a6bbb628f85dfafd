// Package partition turns a Kafka record into its business key, hashes the
// key, and computes the partition a producer would have chosen for it.
//
// # Business keys
//
// A business key is what makes two records the same event for the business:
// an order id, a payment serial, an order id together with a status. It is
// never the Kafka offset or a message id, because retries, redeliveries and
// replays produce new ones for the same event. The job keeps the first record
// per business key within the dedup window and drops the rest.
//
// A key is made of one or more fields (see Field and ParseField), each taken
// from the record key ("key"), a header ("header:NAME", the last header of
// that name) or a member of the JSON value ("json:order.id", a dotted path
// through nested objects). JSON strings are unescaped (all escapes,
// including \uXXXX and surrogate pairs; a lone surrogate becomes U+FFFD as in
// encoding/json); numbers, true and false are taken as their literal text, so
// the string "42" and the number 42 give the same key part while 42 and 42.0
// do not. The JSON value is validated in full, with encoding/json's notion
// of validity, and when a name repeats inside an object the last occurrence
// counts. Bytes that are not valid UTF-8 are kept as they are (encoding/json
// would replace them with U+FFFD), so that different keys stay different.
//
// # Key encoding
//
// With one field, the key is that field's bytes as they are, so operators see
// the real order id in logs, the DLQ and the state store's tools.
//
// With several fields, each part is written as its length in bytes
// (unsigned varint, encoding/binary.AppendUvarint) followed by the bytes:
//
//	uvarint(len(p1)) p1 uvarint(len(p2)) p2 ...
//
// This is a prefix-free code, so the encoding is injective for a fixed list of
// fields: ("ab", "c") and ("a", "bc") give different keys. EncodeKey builds the
// same bytes from parts. Changing the list of fields, or their order, changes
// every key: state written under the old list no longer matches.
//
// The encoded key is bounded by the Extractor's maximum length. Each part
// must be non-empty: an empty order id would make every record that lacks one
// a duplicate of the first, and that silent loss is worse than a DLQ record.
//
// # Errors
//
// A record that yields no key is not a reason to stop the job: Extract
// returns a *KeyError whose Reason goes into the DLQ header. The reasons and
// their stable names are:
//
//	not_json       the value is not valid JSON (a JSON field is configured)
//	field_missing  no such key, header or member, or the member is null
//	not_scalar     the member is an object or an array
//	key_too_long   the encoded key exceeds the maximum length
//	empty_key      the field exists but is empty
//	bad_version    a version field is not an integer in [0, 2^64)
//
// # Hashing
//
// HashKey gives the 128-bit identity (xxh3-128) that the stage uses for its
// batch map, Bloom probes and store keys; it is computed once per record.
//
// # Partitioners
//
// In the "input" partitioning mode every producer must have routed a key to
// the same partition. Murmur2Partition (Java's default), FNV1aPartition
// (kafka-go's Hash balancer) and CRC32Partition (librdkafka's default)
// recompute a producer's choice so the job can count records that arrived
// elsewhere. Murmur2Partition is also the partitioner for the repartition
// topic, so that its keys agree with Java producers.
//
// # Allocations
//
// Extract, ExtractUint, HashKey and the partition functions do not allocate
// on success when the destination slice has room; errors cost one
// allocation. JSON values nested more than 64 levels deep cost a few more
// (the scanner's nesting stack doubles past 64 levels).
package partition
