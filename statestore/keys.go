package statestore

import (
	"encoding/binary"
	"errors"
	"math"

	"github.com/dedupstream/dedupstream/partition"
)

// Key layout (see doc.go):
//
//	metadata: 0x00 name
//	run key:  0x01 gen(8, big-endian) run(8, big-endian) hash(16, big-endian)
//
// A run key names a pack of the run: hash is the pack's last hash
// (packs.go).
//
// Metadata sorts before every bucket, so a DeleteRange over buckets never
// touches it, and the bucket keyspace is the single span [0x01, 0x02). Each
// run of a generation is its own key range 0x01+gen+run, which no other run
// overlaps: an ingested run lands in the last level and is never rewritten
// by Pebble.
const (
	prefixMeta   byte = 0x00
	prefixBucket byte = 0x01
	prefixEnd    byte = 0x02 // exclusive upper bound of the bucket keyspace

	bucketKeyLen = 1 + 8 + 8 + 16
	genPrefixLen = 1 + 8
	runPrefixLen = 1 + 8 + 8
)

var (
	metaStateKey  = []byte{prefixMeta, 's'}
	metaFloorKey  = []byte{prefixMeta, 'f'}
	metaFormatKey = []byte{prefixMeta, 'v'}
	metaRunsKey   = []byte{prefixMeta, 'r'}

	bucketsStart = []byte{prefixBucket}
	bucketsEnd   = []byte{prefixEnd}
)

// layoutVersion is stored in the format key; bump it on an incompatible
// change of the key or value encoding. Layout 1 kept one key per hash in a
// generation bucket written through the memtable; layout 2 kept sorted runs
// of one Pebble key per hash; layout 3 keeps sorted runs in packs of
// hashes, one Pebble key per pack (packs.go, doc.go); layout 4 (session 10)
// is layout 3 whose run filters may record their probes per key in their
// trailer (filter.go): this build reads layout 3 as it is and records
// layout 4 when it opens one writable, so that a build of layout 3, which
// would take such a filter for none (correct, but every probe a block
// read), refuses the store.
const layoutVersion = 4

// layoutOldest is the oldest layout this build opens; older stores are
// refused with a message naming the directory and what to do.
const layoutOldest = 3

const (
	formatFlagVersionMode = 1 << 0
)

// putRunKey writes the key of h in run id of generation gen into k, which
// must be bucketKeyLen bytes long.
func putRunKey(k []byte, gen, id uint64, h partition.Hash) {
	k[0] = prefixBucket
	binary.BigEndian.PutUint64(k[1:9], gen)
	binary.BigEndian.PutUint64(k[9:17], id)
	h.Put(k[17:33])
}

// putRunPrefix writes the prefix 0x01+gen+id into k (runPrefixLen bytes).
func putRunPrefix(k []byte, gen, id uint64) {
	k[0] = prefixBucket
	binary.BigEndian.PutUint64(k[1:9], gen)
	binary.BigEndian.PutUint64(k[9:17], id)
}

// runStart returns the first key of run id of generation gen.
func runStart(gen, id uint64) []byte {
	k := make([]byte, runPrefixLen)
	k[0] = prefixBucket
	binary.BigEndian.PutUint64(k[1:9], gen)
	binary.BigEndian.PutUint64(k[9:17], id)
	return k
}

// runEnd returns the exclusive upper bound of run id of generation gen.
func runEnd(gen, id uint64) []byte {
	if id == math.MaxUint64 {
		return genEnd(gen)
	}
	return runStart(gen, id+1)
}

// genStart returns the first key of bucket gen. For gen == MaxUint64+1 (that
// is, the end of the last possible bucket) use bucketsEnd.
func genStart(gen uint64) []byte {
	k := make([]byte, genPrefixLen)
	k[0] = prefixBucket
	binary.BigEndian.PutUint64(k[1:], gen)
	return k
}

// genEnd returns the exclusive upper bound of bucket gen.
func genEnd(gen uint64) []byte {
	if gen == math.MaxUint64 {
		return bucketsEnd
	}
	return genStart(gen + 1)
}

// parseRunKey splits a run key. ok is false for keys of another shape.
func parseRunKey(k []byte) (gen, id uint64, h partition.Hash, ok bool) {
	if len(k) != bucketKeyLen || k[0] != prefixBucket {
		return 0, 0, partition.Hash{}, false
	}
	return binary.BigEndian.Uint64(k[1:9]), binary.BigEndian.Uint64(k[9:17]), partition.HashFromBytes(k[17:33]), true
}

// State encoding: version byte, uvarint Seq, uvarint Generation, then the
// opaque checkpoint bytes to the end.
const stateEncoding = 1

func appendState(dst []byte, st State) []byte {
	dst = append(dst, stateEncoding)
	dst = binary.AppendUvarint(dst, st.Seq)
	dst = binary.AppendUvarint(dst, st.Generation)
	return append(dst, st.Checkpoint...)
}

var errCorruptState error = &corruptError{errors.New("statestore: corrupt state record")}

func decodeState(v []byte) (State, error) {
	if len(v) < 1 || v[0] != stateEncoding {
		return State{}, errCorruptState
	}
	v = v[1:]
	seq, n := binary.Uvarint(v)
	if n <= 0 {
		return State{}, errCorruptState
	}
	v = v[n:]
	gen, n := binary.Uvarint(v)
	if n <= 0 {
		return State{}, errCorruptState
	}
	v = v[n:]
	st := State{Seq: seq, Generation: gen}
	if len(v) > 0 {
		st.Checkpoint = append([]byte(nil), v...)
	}
	return st, nil
}
