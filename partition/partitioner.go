package partition

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Names of the partitioners that producers commonly use for keyed records,
// as accepted by PartitionerByName.
const (
	// PartitionerMurmur2 is Java's default (DefaultPartitioner and, since
	// Kafka 3.3, BuiltInPartitioner), librdkafka's "murmur2" and
	// "murmur2_random", and kafka-go's Murmur2Balancer.
	PartitionerMurmur2 = "murmur2"
	// PartitionerFNV1a is kafka-go's Hash balancer and Sarama's default
	// hash partitioner.
	PartitionerFNV1a = "fnv1a"
	// PartitionerCRC32 is librdkafka's default "consistent_random" (and
	// so confluent-kafka-go's and the other bindings'), and kafka-go's
	// CRC32Balancer.
	PartitionerCRC32 = "crc32"
)

// PartitionerByName returns the partition function a producer named by
// name uses for keyed records: one of PartitionerMurmur2, PartitionerFNV1a
// and PartitionerCRC32.
//
// A producer spreads records that have no key without looking at it (round
// robin, sticky or random), so a partition check must skip them: a null key
// for every partitioner, and also an empty key for crc32, because librdkafka
// treats empty like null.
func PartitionerByName(name string) (func(key []byte, n int) int, error) {
	switch name {
	case PartitionerMurmur2:
		return Murmur2Partition, nil
	case PartitionerFNV1a:
		return FNV1aPartition, nil
	case PartitionerCRC32:
		return CRC32Partition, nil
	}
	return nil, fmt.Errorf("partition: unknown partitioner %q, want %s, %s or %s",
		name, PartitionerMurmur2, PartitionerFNV1a, PartitionerCRC32)
}

// Murmur2 returns Kafka's 32-bit murmur2 hash of b, bit for bit the value of
// Java's org.apache.kafka.common.utils.Utils.murmur2 (which works on signed
// Java ints, hence int32).
func Murmur2(b []byte) int32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	h := uint32(seed) ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := binary.LittleEndian.Uint32(b)
		k *= m
		k ^= k >> r
		k *= m
		h = h*m ^ k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// Murmur2Partition returns the partition, in [0, n), that Java's default
// partitioner chooses for key among n partitions:
// toPositive(murmur2(key)) % n, where toPositive clears the sign bit.
// It panics if n <= 0.
func Murmur2Partition(key []byte, n int) int {
	checkPartitions(n)
	return int(uint32(Murmur2(key))&0x7fffffff) % n
}

// FNV1aPartition returns the partition, in [0, n), that kafka-go's Hash
// balancer (and Sarama's hash partitioner) chooses for key among n
// partitions: the 32-bit FNV-1a hash taken as a signed int32, modulo n,
// sign dropped. This is not the same as clearing the sign bit first, so it
// differs from Sarama's "reference" hash partitioner. It panics if n <= 0.
func FNV1aPartition(key []byte, n int) int {
	checkPartitions(n)
	const (
		offset32 = 2166136261
		prime32  = 16777619
	)
	h := uint32(offset32)
	for _, c := range key {
		h ^= uint32(c)
		h *= prime32
	}
	p := int32(h) % int32(n)
	if p < 0 {
		p = -p
	}
	return int(p)
}

// CRC32Partition returns the partition, in [0, n), that librdkafka's
// default "consistent_random" partitioner (and kafka-go's CRC32Balancer)
// chooses for a non-empty key among n partitions: CRC-32 (IEEE) of the key,
// unsigned, modulo n. It panics if n <= 0.
func CRC32Partition(key []byte, n int) int {
	checkPartitions(n)
	return int(crc32.ChecksumIEEE(key) % uint32(n))
}

func checkPartitions(n int) {
	if n <= 0 || n > 1<<31-1 {
		panic(fmt.Sprintf("partition: partition count must be in [1, 2^31), got %d", n))
	}
}
