package partition

import (
	"bytes"
	"fmt"
	"testing"
)

func TestHashKeyKnownVector(t *testing.T) {
	// XXH3_128bits of the empty input, from the xxHash reference.
	want := Hash{Hi: 0x99aa06d3014798d8, Lo: 0x6001c324468d497f}
	if got := HashKey(nil); got != want {
		t.Fatalf("HashKey(empty) = %016x%016x, want %016x%016x", got.Hi, got.Lo, want.Hi, want.Lo)
	}
}

func TestHashPutRoundTrip(t *testing.T) {
	h := Hash{Hi: 0x0102030405060708, Lo: 0x090a0b0c0d0e0f10}
	var b [17]byte
	b[16] = 0xee
	h.Put(b[:])
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0xee}
	if !bytes.Equal(b[:], want) {
		t.Fatalf("Put wrote %x, want %x (big-endian, 16 bytes only)", b, want)
	}
	if got := HashFromBytes(b[:]); got != h {
		t.Fatalf("HashFromBytes = %+v, want %+v", got, h)
	}
}

func TestHashKeyDistinct(t *testing.T) {
	// Keys that differ in one character, in length, or only in how a
	// composite splits them must not share a hash.
	seen := make(map[Hash]string, 100000)
	add := func(k []byte) {
		h := HashKey(k)
		if prev, ok := seen[h]; ok && prev != string(k) {
			t.Fatalf("keys %q and %q share hash %+v", prev, k, h)
		}
		seen[h] = string(k)
	}
	for i := range 100000 {
		add(fmt.Appendf(nil, "order-%d", i))
	}
	add(EncodeKey(nil, []byte("ab"), []byte("c")))
	add(EncodeKey(nil, []byte("a"), []byte("bc")))
	if len(seen) != 100002 {
		t.Fatalf("%d distinct hashes, want 100002", len(seen))
	}
	// The hash covers exactly the key's bytes, wherever they are: a key
	// inside a larger buffer hashes like the key alone (nothing before or
	// after it is read), and changing one of its bytes changes the hash.
	want := HashKey([]byte("order-7"))
	buf := []byte("xorder-7y")
	if HashKey(buf[1:8]) != want {
		t.Fatal("HashKey of a key inside a larger buffer differs from the key alone")
	}
	buf[4] = 'D'
	if HashKey(buf[1:8]) == want {
		t.Fatal("HashKey did not change when a byte of the key changed")
	}
}

func TestHashKeyDoesNotAllocate(t *testing.T) {
	key := []byte("0f8fad5b-d9cb-469f-a165-70867728950e")
	var sink Hash
	if n := testing.AllocsPerRun(100, func() { sink = HashKey(key) }); n != 0 {
		t.Fatalf("HashKey allocates %.1f times per call", n)
	}
	_ = sink
}
