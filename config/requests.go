package config

// Fetch sizes the fetch requests of the stages and route steps. Request
// count, not bytes, drives the cost of reading (each request is a round trip
// and a pass through the broker's request queue), so the defaults are large.
type Fetch struct {
	// PartitionMaxBytes bounds the record data one fetch returns for one
	// partition (Kafka's max.partition.fetch.bytes); each fetcher keeps a
	// buffer of about this size, one per raw topic and owned partition plus
	// one for reading the output back. A record batch larger than it is
	// still returned whole. The default value is 1MiB, chosen by
	// measurement on a 3-broker cluster: 2MiB and 4MiB were not faster
	// (docs/benchmarks.md, "Real cluster").
	PartitionMaxBytes ByteSize `yaml:"partition_max_bytes"`
	// RequestMaxBytes bounds a whole fetch response (Kafka's
	// fetch.max.bytes). It must be at least partition_max_bytes: a response
	// cut by the request limit may leave out the aborted-transaction list
	// that read_committed filtering needs. The default value is 50MiB.
	RequestMaxBytes ByteSize `yaml:"request_max_bytes"`
	// MinBytes is the record data a broker waits for before it answers a
	// stage's or route step's fetch (Kafka's fetch.min.bytes), at most
	// until the end of the cycle's read phase (commit.interval). At input
	// rates below min_bytes per commit interval a partition is then read
	// once or twice per cycle, and its output produced as often, instead of
	// once per produce request of the input: the brokers' load from the
	// job no longer grows with how finely the input was produced, and a
	// record waits for the cycle's commit either way. It must not exceed
	// partition_max_bytes; 1 answers as soon as anything is readable. The
	// default value is partition_max_bytes (docs/benchmarks.md, "Fetches
	// that wait for the read phase").
	MinBytes ByteSize `yaml:"min_bytes"`
	// Ahead sends each partition's next fetch before the batch it just
	// returned is decided and produced (one batch ahead), so the fetch's
	// round trip overlaps the work instead of adding to it. Each fetcher
	// then keeps two buffers of about partition_max_bytes. A prefetched
	// batch belongs to the next decide step; after an abort it is dropped
	// and read again from the committed offset. The default value is true.
	Ahead *bool `yaml:"ahead"`
}

// Produce sizes the produce requests of the stages and route steps.
type Produce struct {
	// BatchMaxBytes caps one encoded record batch; a cycle's records are
	// sent in batches of at most this size, one produce request each. It
	// must not exceed the output topic's max.message.bytes (the broker
	// default is 1MiB plus a few bytes). The default value is 1MiB
	// (256KiB measured slower).
	BatchMaxBytes ByteSize `yaml:"batch_max_bytes"`
	// MaxInFlight is how many produce requests (record batches) a stage or
	// route step keeps in flight within its transaction, 1 to 5 (the
	// batches per producer and partition a broker remembers to recognise
	// a resend). Batches carry consecutive sequence numbers and are stored
	// in that order only; one that fails is resent with every later one,
	// in order, or the cycle aborts and recovers: never reordered, never
	// stored twice. Each request in flight holds a buffer of up to
	// batch_max_bytes. Produce requests go on the stage's own connection
	// to each broker, written back to back and answered in order, so the
	// batches in flight reach the broker in sequence order (package sink,
	// pipe.go). The default value is 5, chosen by measurement on a
	// 3-broker cluster with and without 1 ms round trips
	// (docs/benchmarks.md, "Produce connections").
	MaxInFlight int `yaml:"max_in_flight"`
}

// Defaults of Fetch and Produce.
const (
	DefaultFetchPartitionMaxBytes ByteSize = 1 << 20
	DefaultFetchRequestMaxBytes   ByteSize = 50 << 20
	DefaultProduceBatchMaxBytes   ByteSize = 1 << 20
	DefaultProduceMaxInFlight              = 5
)

const maxInt32 = 1<<31 - 1

func (f *Fetch) applyDefaults() {
	if f.PartitionMaxBytes == 0 {
		f.PartitionMaxBytes = DefaultFetchPartitionMaxBytes
	}
	if f.RequestMaxBytes == 0 {
		f.RequestMaxBytes = max(DefaultFetchRequestMaxBytes, f.PartitionMaxBytes)
	}
	if f.MinBytes == 0 {
		f.MinBytes = f.PartitionMaxBytes
	}
	if f.Ahead == nil {
		on := true
		f.Ahead = &on
	}
}

func (p *Produce) applyDefaults() {
	if p.BatchMaxBytes == 0 {
		p.BatchMaxBytes = DefaultProduceBatchMaxBytes
	}
	if p.MaxInFlight == 0 {
		p.MaxInFlight = DefaultProduceMaxInFlight
	}
}

// sizeIn reports field unless lo <= got <= maxInt32 (Kafka's int32 sizes).
func (v *validator) sizeIn(field string, got, lo ByteSize) bool {
	if got < lo || got > maxInt32 {
		v.addf(field, "must be between %v and %v, got %v", lo, ByteSize(maxInt32), got)
		return false
	}
	return true
}

func (f *Fetch) validate(v *validator) {
	okP := v.sizeIn("fetch.partition_max_bytes", f.PartitionMaxBytes, 1<<10)
	okR := v.sizeIn("fetch.request_max_bytes", f.RequestMaxBytes, 1<<10)
	if okP && okR && f.RequestMaxBytes < f.PartitionMaxBytes {
		v.addf("fetch.request_max_bytes", "must be >= fetch.partition_max_bytes (%v), got %v", f.PartitionMaxBytes, f.RequestMaxBytes)
	}
	if okP && (f.MinBytes < 1 || f.MinBytes > f.PartitionMaxBytes) {
		v.addf("fetch.min_bytes", "must be between 1 and fetch.partition_max_bytes (%v), got %v", f.PartitionMaxBytes, f.MinBytes)
	}
}

func (p *Produce) validate(v *validator) {
	v.sizeIn("produce.batch_max_bytes", p.BatchMaxBytes, 1<<10)
	if p.MaxInFlight < 1 || p.MaxInFlight > 5 {
		v.addf("produce.max_in_flight", "must be between 1 and 5, got %d", p.MaxInFlight)
	}
}

// FetchAhead reports whether fetches run one batch ahead (Ahead, true when
// unset).
func (f *Fetch) FetchAhead() bool { return f.Ahead == nil || *f.Ahead }
