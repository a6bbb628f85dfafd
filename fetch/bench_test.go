package fetch

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// benchRecords is the size of the pre-filled topic; each record has a 16-byte
// key and an 84-byte value.
const benchRecords = 200_000

// BenchmarkRead reads the same pre-filled topic with the Fetcher and with
// kafka-go's Reader (both read_committed, MaxBytes 1 MiB) and reports
// records/s and allocations per record for each; one op reads the whole
// topic. The parent logs the records/s ratio.
//
// The kfake broker runs in a child process (this test binary, see
// TestBrokerProcess) so that the allocation counts are the client's alone;
// with KAFKA_BROKERS set, those brokers are used.
func BenchmarkRead(b *testing.B) {
	brokers := kafkatest.External()
	if brokers == nil {
		brokers = brokerProcess(b)
	}
	cl := kafkatest.NewClient(b, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerBatchMaxBytes(1<<20))
	topic := newTopic(b, cl, "bench")
	fill(b, cl, topic)

	rate := map[string]float64{}
	b.Run("fetcher", func(b *testing.B) {
		f := newFetcher(b, brokers, topic, Options{MaxBytes: 1 << 20})
		var batch Batch
		ctx := context.Background()
		measure(b, rate, "fetcher", func() int {
			f.SetPosition(0)
			n := 0
			for n < benchRecords {
				if err := f.Fetch(ctx, &batch); err != nil {
					b.Fatal(err)
				}
				n += len(batch.Records)
			}
			return n
		})
	})
	b.Run("reader", func(b *testing.B) {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:   brokers,
			Topic:     topic,
			Partition: 0,
			MinBytes:  1,
			MaxBytes:  1 << 20,
			// The Reader prefetches past the last record and long-polls
			// at the end; SetOffset then waits out that poll. A short
			// MaxWait keeps that wait out of its numbers (it only
			// applies when no data is available).
			MaxWait:        10 * time.Millisecond,
			IsolationLevel: kafka.ReadCommitted,
		})
		defer r.Close()
		ctx := context.Background()
		measure(b, rate, "reader", func() int {
			if err := r.SetOffset(0); err != nil {
				b.Fatal(err)
			}
			n := 0
			for n < benchRecords {
				if _, err := r.ReadMessage(ctx); err != nil {
					b.Fatal(err)
				}
				n++
			}
			return n
		})
	})
	if rate["reader"] > 0 && rate["fetcher"] > 0 {
		b.Logf("fetcher/reader records/s ratio: %.2fx", rate["fetcher"]/rate["reader"])
	}
}

// measure runs read b.N times and reports records/s, allocs/record and
// B/record.
func measure(b *testing.B, rate map[string]float64, name string, read func() int) {
	read() // warm up: connections, leader, buffers
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	total := 0
	for range b.N {
		total += read()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	perSec := float64(total) / b.Elapsed().Seconds()
	rate[name] = perSec
	b.ReportMetric(perSec, "records/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(total), "allocs/record")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(total), "B/record")
}

// fill writes benchRecords records of about 100 bytes to partition 0.
func fill(tb testing.TB, cl *kgo.Client, topic string) {
	tb.Helper()
	value := make([]byte, 84)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	var failed atomic.Value
	for i := range benchRecords {
		r := &kgo.Record{Topic: topic, Partition: 0, Key: fmt.Appendf(nil, "key-%011d", i), Value: value}
		cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
		})
	}
	if err := cl.Flush(testContext(tb)); err != nil {
		tb.Fatal(err)
	}
	if err, _ := failed.Load().(error); err != nil {
		tb.Fatal(err)
	}
}

// envBrokerProcess makes TestBrokerProcess serve a kfake cluster.
const envBrokerProcess = "FETCH_TEST_BROKER_PROCESS"

// TestBrokerProcess is not a test: run by brokerProcess in a child process,
// it starts a kfake cluster, prints its address and serves until its stdin
// closes.
func TestBrokerProcess(t *testing.T) {
	if os.Getenv(envBrokerProcess) != "1" {
		t.Skip("helper process for BenchmarkRead")
	}
	c := kafkatest.NewCluster(t)
	fmt.Printf("brokers %s\n", strings.Join(c.ListenAddrs(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// brokerProcess starts TestBrokerProcess in a child process and returns its
// broker addresses; the child ends with the benchmark.
func brokerProcess(tb testing.TB) []string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBrokerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envBrokerProcess+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addrs, ok := strings.CutPrefix(sc.Text(), "brokers "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return strings.Split(addrs, ",")
		}
	}
	tb.Fatalf("broker process: no address (%v)", sc.Err())
	return nil
}

// BenchmarkPartitionCounts measures the client side of the commit's
// partition-count check (job/topicguard.go): one uncached Metadata request
// for three topics of 4 partitions (two raw topics and the output), CPU
// and allocations of this process per request, with the broker in a child
// process (or KAFKA_BROKERS).
func BenchmarkPartitionCounts(b *testing.B) {
	brokers := kafkatest.External()
	if brokers == nil {
		brokers = brokerProcess(b)
	}
	cl := kafkatest.NewClient(b, brokers)
	var topics []string
	for range 3 {
		topics = append(topics, newTopic(b, cl, "count"))
	}
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: newTransport(b)}
	ctx := context.Background()
	if _, err := PartitionCounts(ctx, client, topics, ""); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		counts, err := PartitionCounts(ctx, client, topics, "")
		if err != nil || len(counts) != len(topics) {
			b.Fatal(counts, err)
		}
	}
	b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N)/1e3, "cpu-us/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
