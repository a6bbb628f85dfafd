package partition

import (
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"testing"

	kafka "github.com/segmentio/kafka-go"
)

// Expected values of Java's Utils.murmur2, as asserted by Kafka's UtilsTest
// (the first six) and by other clients' ports of it.
var murmur2Vectors = []struct {
	in   string
	want int32
}{
	{"21", -973932308},
	{"foobar", -790332482},
	{"a-little-bit-long-string", -985981536},
	{"a-little-bit-longer-string", -1486304829},
	{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
	{"abc", 479470107},
	{"1", -1993445489},
	{"12", 126087238},
	{"123", -267702483},
	{"1234", -1614185708},
	{"12345", -1188365604},
}

func TestMurmur2JavaVectors(t *testing.T) {
	for _, v := range murmur2Vectors {
		t.Run(v.in, func(t *testing.T) {
			if got := Murmur2([]byte(v.in)); got != v.want {
				t.Fatalf("Murmur2(%q) = %d, want %d", v.in, got, v.want)
			}
			// Java: Utils.toPositive(murmur2(key)) % numPartitions.
			for _, n := range []int{1, 3, 12, 100} {
				want := int(v.want&0x7fffffff) % n
				if got := Murmur2Partition([]byte(v.in), n); got != want {
					t.Fatalf("Murmur2Partition(%q, %d) = %d, want %d", v.in, n, got, want)
				}
			}
		})
	}
}

func randomKey(rng *rand.Rand) []byte {
	key := make([]byte, rng.IntN(70)+1)
	for i := range key {
		key[i] = byte(rng.Uint32())
	}
	return key
}

func seq(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	return p
}

// TestPartitionersAgainstKafkaGo compares each function with the kafka-go
// balancer it claims to match, over random keys (every length mod 4 and
// high-bit bytes) and partition counts.
func TestPartitionersAgainstKafkaGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	murmur := kafka.Murmur2Balancer{}
	crc := kafka.CRC32Balancer{}
	hash := &kafka.Hash{}
	for range 20000 {
		key := randomKey(rng)
		n := rng.IntN(200) + 1
		parts := seq(n)
		msg := kafka.Message{Key: key}
		if got, want := Murmur2Partition(key, n), murmur.Balance(msg, parts...); got != want {
			t.Fatalf("Murmur2Partition(%x, %d) = %d, kafka-go Murmur2Balancer = %d", key, n, got, want)
		}
		if got, want := CRC32Partition(key, n), crc.Balance(msg, parts...); got != want {
			t.Fatalf("CRC32Partition(%x, %d) = %d, kafka-go CRC32Balancer = %d", key, n, got, want)
		}
		if got, want := FNV1aPartition(key, n), hash.Balance(msg, parts...); got != want {
			t.Fatalf("FNV1aPartition(%x, %d) = %d, kafka-go Hash = %d", key, n, got, want)
		}
	}
	// An empty, non-nil key is hashed by Java and by kafka-go's murmur2.
	if got, want := Murmur2Partition([]byte{}, 7), murmur.Balance(kafka.Message{Key: []byte{}}, seq(7)...); got != want {
		t.Fatalf("Murmur2Partition(empty, 7) = %d, kafka-go = %d", got, want)
	}
}

// TestFNV1aSign pins the conversion that makes kafka-go's Hash balancer
// differ from "clear the sign bit": keys whose FNV-1a hash has the top bit
// set, checked against the standard library's FNV-1a.
func TestFNV1aSign(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	negatives := 0
	for range 2000 {
		key := randomKey(rng)
		h := fnv.New32a()
		h.Write(key)
		sum := int32(h.Sum32())
		n := rng.IntN(50) + 1
		want := int(sum % int32(n))
		if want < 0 {
			want = -want
			negatives++
		}
		if got := FNV1aPartition(key, n); got != want {
			t.Fatalf("FNV1aPartition(%x, %d) = %d, want %d", key, n, got, want)
		}
	}
	if negatives == 0 {
		t.Fatal("no key exercised the negative-hash path")
	}
}

func TestPartitionerByName(t *testing.T) {
	key := []byte("order-42")
	for name, want := range map[string]func([]byte, int) int{
		"murmur2": Murmur2Partition,
		"fnv1a":   FNV1aPartition,
		"crc32":   CRC32Partition,
	} {
		f, err := PartitionerByName(name)
		if err != nil {
			t.Fatalf("PartitionerByName(%q): %v", name, err)
		}
		for n := 1; n < 64; n++ {
			if f(key, n) != want(key, n) {
				t.Fatalf("PartitionerByName(%q) is not the %s function", name, name)
			}
		}
	}
	// The three differ, so a mix-up above would have been caught.
	if Murmur2Partition(key, 1000) == FNV1aPartition(key, 1000) || Murmur2Partition(key, 1000) == CRC32Partition(key, 1000) {
		t.Fatal("test key does not separate the partitioners")
	}
	for _, bad := range []string{"", "Murmur2", "murmur2_random", "consistent_random", "random"} {
		if _, err := PartitionerByName(bad); err == nil || !strings.HasPrefix(err.Error(), "partition: unknown partitioner") {
			t.Errorf("PartitionerByName(%q) error = %v", bad, err)
		}
	}
}

func TestPartitionCountPanics(t *testing.T) {
	for _, n := range []int{0, -1, 1 << 31} {
		for name, f := range map[string]func([]byte, int) int{"murmur2": Murmur2Partition, "fnv1a": FNV1aPartition, "crc32": CRC32Partition} {
			func() {
				defer func() {
					if r := recover(); r == nil {
						t.Errorf("%s(key, %d) did not panic", name, n)
					}
				}()
				f([]byte("k"), n)
			}()
		}
	}
}

func TestPartitionersDoNotAllocate(t *testing.T) {
	key := []byte("0f8fad5b-d9cb-469f-a165-70867728950e")
	for name, f := range map[string]func([]byte, int) int{"murmur2": Murmur2Partition, "fnv1a": FNV1aPartition, "crc32": CRC32Partition} {
		if n := testing.AllocsPerRun(100, func() { f(key, 12) }); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}
