package fetch

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
)

// TestFetchSizesOnTheWire checks, at the broker, that a fetch carries
// MaxBytes as the partition limit and MaxRequestBytes as the response limit,
// and what they default to.
func TestFetchSizesOnTheWire(t *testing.T) {
	c := kfakeCluster(t, 1)
	brokers := c.ListenAddrs()
	admin := kafkatest.NewClient(t, brokers)
	topic := newTopic(t, admin, "sizes")
	produceWith(t, admin, topic, [2]string{"k", "v"})

	var mu sync.Mutex
	type limits struct{ partition, request int32 }
	var seen []limits
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.FetchRequest)
		for _, tp := range r.Topics {
			for _, p := range tp.Partitions {
				mu.Lock()
				seen = append(seen, limits{p.PartitionMaxBytes, r.MaxBytes})
				mu.Unlock()
			}
		}
		return nil, nil, false
	})
	for _, tc := range []struct {
		name string
		opts Options
		want limits
	}{
		{"defaults", Options{}, limits{1 << 20, 50 << 20}},
		{"large partition limit doubles the default request limit", Options{MaxBytes: 32 << 20}, limits{32 << 20, 64 << 20}},
		{"both set", Options{MaxBytes: 4 << 20, MaxRequestBytes: 8 << 20}, limits{4 << 20, 8 << 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			f := newFetcher(t, brokers, topic, tc.opts)
			f.SetPosition(0)
			var b Batch
			if err := f.Fetch(testContext(t), &b); err != nil {
				t.Fatal(err)
			}
			if len(b.Records) != 1 {
				t.Fatalf("%d records, want 1", len(b.Records))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) == 0 {
				t.Fatal("the broker saw no fetch")
			}
			for _, got := range seen {
				if got != tc.want {
					t.Errorf("broker saw partition/request limits %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

func TestMaxRequestBytesValidated(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{MaxBytes: 8 << 20, MaxRequestBytes: 4 << 20}, "fetch.max_request_bytes: must be >= max_bytes (8388608), got 4194304"},
		{Options{MaxRequestBytes: 1 << 10}, "fetch.max_request_bytes: must be >= max_bytes (1048576), got 1024"},
		{Options{MaxRequestBytes: -1}, "fetch.max_request_bytes: must be in"},
	} {
		_, err := New(&kafka.Client{Addr: kafka.TCP("127.0.0.1:1")}, "t", 0, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.opts, err, tc.want)
		}
	}
	if _, err := New(&kafka.Client{Addr: kafka.TCP("127.0.0.1:1")}, "t", 0, Options{MaxBytes: 4 << 20, MaxRequestBytes: 4 << 20}); err != nil {
		t.Errorf("equal limits: %v", err)
	}
}

// TestFetchWaitOnTheWire checks, at the broker, that FetchWait sends its
// wait (MinBytes capped at MaxBytes, at least 1; Max in milliseconds),
// Fetch the Options', and Heads asks for an answer at once; and that a
// fetch waiting for more than there is still returns what there is.
func TestFetchWaitOnTheWire(t *testing.T) {
	c := kfakeCluster(t, 1)
	brokers := c.ListenAddrs()
	admin := kafkatest.NewClient(t, brokers)
	topic := newTopic(t, admin, "wait")
	produceWith(t, admin, topic, [2]string{"k", "v"})

	type wait struct{ minBytes, maxMs int32 }
	var (
		mu   sync.Mutex
		seen []wait
	)
	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		r := req.(*kmsg.FetchRequest)
		mu.Lock()
		seen = append(seen, wait{r.MinBytes, r.MaxWaitMillis})
		mu.Unlock()
		return nil, nil, false
	})
	f := newFetcher(t, brokers, topic, Options{MaxBytes: 64 << 10, MinBytes: 10, MaxWait: 300 * time.Millisecond})
	for _, tc := range []struct {
		name  string
		fetch func(*Batch) error
		want  wait
	}{
		{"Fetch: the options", func(b *Batch) error { return f.Fetch(testContext(t), b) }, wait{10, 300}},
		{"FetchWait", func(b *Batch) error {
			return f.FetchWait(testContext(t), b, Wait{Max: 40 * time.Millisecond, MinBytes: 4 << 10})
		}, wait{4 << 10, 40}},
		{"FetchWait: MinBytes capped at MaxBytes", func(b *Batch) error {
			return f.FetchWait(testContext(t), b, Wait{Max: 20 * time.Millisecond, MinBytes: 1 << 20})
		}, wait{64 << 10, 20}},
		{"FetchWait: at least 1 byte", func(b *Batch) error {
			return f.FetchWait(testContext(t), b, Wait{Max: 20 * time.Millisecond})
		}, wait{1, 20}},
		{"Heads: at once", func(*Batch) error {
			_, err := f.Heads(testContext(t), 0, 1)
			return err
		}, wait{1, 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			f.SetPosition(0)
			var b Batch
			if err := tc.fetch(&b); err != nil {
				t.Fatal(err)
			}
			if tc.name != "Heads: at once" && len(b.Records) != 1 {
				t.Fatalf("%d records, want the 1 there is", len(b.Records))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 1 || seen[0] != tc.want {
				t.Errorf("broker saw waits %+v, want one %+v", seen, tc.want)
			}
		})
	}
}
