package partition

import (
	"encoding/binary"

	"github.com/zeebo/xxh3"
)

// Hash is the 128-bit identity of a business key. It is computed once per
// record (xxh3-128) and then serves every later step: the in-batch collapse
// map, the Bloom probes and the state-store key. 64 bits would give a
// birthday collision among ~4e9 keys; 128 bits keeps exactness at any
// realistic key count.
type Hash struct {
	Hi, Lo uint64
}

// HashKey returns the 128-bit hash of a business key.
func HashKey(key []byte) Hash {
	h := xxh3.Hash128(key)
	return Hash{Hi: h.Hi, Lo: h.Lo}
}

// Put writes the hash big-endian into b, which must hold at least 16 bytes.
func (h Hash) Put(b []byte) {
	binary.BigEndian.PutUint64(b[0:8], h.Hi)
	binary.BigEndian.PutUint64(b[8:16], h.Lo)
}

// HashFromBytes reads a hash written by Put.
func HashFromBytes(b []byte) Hash {
	return Hash{Hi: binary.BigEndian.Uint64(b[0:8]), Lo: binary.BigEndian.Uint64(b[8:16])}
}
