package pipeline

import (
	"fmt"

	"github.com/dedupstream/dedupstream/partition"
)

// Keyer reads the identity of records (business key and, in ModeVersion,
// version) exactly as a Stage does, and names the DLQ reason of a record
// it cannot key. A Stage decides with one; the route step of repartition
// mode uses one to pick a record's partition, so that a record nobody can
// key is dead-lettered where it is first read, with its raw source. A
// Keyer is not safe for concurrent use.
type Keyer struct {
	cfg Config
	ext *partition.Extractor
	buf []byte
	// trusted: the records were keyed once already (a restore reads them
	// back from the output), so the key is found without validating the
	// whole text (partition.Extractor.ExtractTrusted).
	trusted bool
}

// NewKeyer returns a Keyer for the key, version and size settings of cfg.
func NewKeyer(cfg Config) (*Keyer, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ext, err := partition.NewExtractor(cfg.Key, cfg.MaxKeyBytes)
	if err != nil {
		return nil, fmt.Errorf("pipeline: dedup.key: %w", err)
	}
	return &Keyer{cfg: cfg, ext: ext, buf: make([]byte, 0, 256)}, nil
}

// Key returns r's business key, valid until the next call, and its version
// (0 in ModeFirst). When r cannot be keyed, reason is the DLQ reason
// (ReasonRecordTooLarge or a partition.Reason's name) and key is nil.
func (k *Keyer) Key(r *Record) (key []byte, version uint64, reason string) {
	if r.size() > k.cfg.MaxRecordBytes {
		return nil, 0, ReasonRecordTooLarge
	}
	key, version, err := k.identity(r)
	if err != nil {
		return nil, 0, reasonOf(err)
	}
	return key, version, ""
}

// identity extracts key and version without the size check: records read
// back from the output were keyed once already.
func (k *Keyer) identity(r *Record) ([]byte, uint64, error) {
	return k.identityOf(&r.Record)
}

// identityOf is identity of the fields of a record.
func (k *Keyer) identityOf(r *partition.Record) ([]byte, uint64, error) {
	var key []byte
	var err error
	if k.trusted {
		key, err = k.ext.ExtractTrusted(k.buf[:0], r)
	} else {
		key, err = k.ext.Extract(k.buf[:0], r)
	}
	if err != nil {
		return nil, 0, err
	}
	k.buf = key[:0]
	if k.cfg.Mode != ModeVersion {
		return key, 0, nil
	}
	version, err := partition.ExtractUint(r, k.cfg.Version)
	if err != nil {
		return nil, 0, err
	}
	return key, version, nil
}

// reasonOf names the DLQ reason of a key or version extraction failure:
// partition.ReasonOf's, or invalid_record for an error without one.
func reasonOf(err error) string {
	if r, ok := partition.ReasonOf(err); ok {
		return r.String()
	}
	return "invalid_record"
}
