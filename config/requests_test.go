package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRequestSizes(t *testing.T) {
	base := "job: {id: j}\nkafka: {brokers: [\"h:1\"]}\ninput: {topics: [in]}\noutput: {topic: out}\nassignment: {partitions: [0]}\nstate: {dir: /tmp/s}\n"
	type sizes struct{ part, req, min, batch ByteSize }
	for _, tc := range []struct {
		name, extra string
		want        sizes
		problems    []string
	}{
		{name: "defaults", want: sizes{1 << 20, 50 << 20, 1 << 20, 1 << 20}},
		{name: "set", extra: "fetch: {partition_max_bytes: 8MiB, request_max_bytes: 16MiB}\nproduce: {batch_max_bytes: 512KiB}\n",
			want: sizes{8 << 20, 16 << 20, 8 << 20, 512 << 10}},
		{name: "request default follows a larger partition limit", extra: "fetch: {partition_max_bytes: 64MiB}\n",
			want: sizes{64 << 20, 64 << 20, 64 << 20, 1 << 20}},
		{name: "min bytes set", extra: "fetch: {min_bytes: 1}\n", want: sizes{1 << 20, 50 << 20, 1, 1 << 20}},
		{name: "min bytes above the partition limit", extra: "fetch:\n  min_bytes: 2MiB\n",
			problems: []string{"job.yaml:8: fetch.min_bytes: must be between 1 and fetch.partition_max_bytes (1MiB), got 2MiB"}},
		{name: "request below partition", extra: "fetch:\n  partition_max_bytes: 8MiB\n  request_max_bytes: 4MiB\n",
			problems: []string{"job.yaml:9: fetch.request_max_bytes: must be >= fetch.partition_max_bytes (8MiB), got 4MiB"}},
		{name: "too small and too large", extra: "fetch:\n  partition_max_bytes: 100\n  request_max_bytes: 4GiB\nproduce:\n  batch_max_bytes: 10\n",
			problems: []string{
				"job.yaml:8: fetch.partition_max_bytes: must be between 1KiB and 2147483647, got 100",
				"job.yaml:9: fetch.request_max_bytes: must be between 1KiB and 2147483647, got 4GiB",
				"job.yaml:11: produce.batch_max_bytes: must be between 1KiB and 2147483647, got 10",
			}},
		{name: "not a size", extra: "produce:\n  batch_max_bytes: big\n", problems: []string{"job.yaml:8: produce.batch_max_bytes: "}},
		{name: "unknown key", extra: "fetch:\n  max_bytes: 1MiB\n", problems: []string{"job.yaml:8: fetch.max_bytes: unknown key"}},
		{name: "in flight out of range", extra: "produce:\n  max_in_flight: 6\n", problems: []string{"job.yaml:8: produce.max_in_flight: must be between 1 and 5, got 6"}},
		{name: "in flight negative", extra: "produce:\n  max_in_flight: -1\n", problems: []string{"job.yaml:8: produce.max_in_flight: must be between 1 and 5, got -1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "job.yaml")
			if err := os.WriteFile(path, []byte(base+tc.extra), 0o644); err != nil {
				t.Fatal(err)
			}
			c, err := load(path, env(nil))
			if len(tc.problems) > 0 {
				if err == nil {
					t.Fatalf("want problems %q, got none", tc.problems)
				}
				for _, p := range tc.problems {
					if !strings.Contains(err.Error(), p) {
						t.Errorf("want problem %q in:\n%v", p, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := sizes{c.Fetch.PartitionMaxBytes, c.Fetch.RequestMaxBytes, c.Fetch.MinBytes, c.Produce.BatchMaxBytes}
			if got != tc.want {
				t.Errorf("sizes = %+v, want %+v", got, tc.want)
			}
			if c.Produce.MaxInFlight != DefaultProduceMaxInFlight {
				t.Errorf("produce.max_in_flight = %d, want the default %d", c.Produce.MaxInFlight, DefaultProduceMaxInFlight)
			}
		})
	}
}

func TestFetchAhead(t *testing.T) {
	base := "job: {id: j}\nkafka: {brokers: [\"h:1\"]}\ninput: {topics: [in]}\noutput: {topic: out}\nassignment: {partitions: [0]}\nstate: {dir: /tmp/s}\n"
	for _, tc := range []struct {
		name, extra string
		want        bool
		problem     string
	}{
		{name: "default", want: true},
		{name: "off", extra: "fetch: {ahead: false}\n", want: false},
		{name: "on", extra: "fetch: {ahead: true}\n", want: true},
		{name: "not a bool", extra: "fetch:\n  ahead: 2\n", problem: "job.yaml:8: fetch.ahead: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := loadCase(t, base+tc.extra, tc.problem)
			if !ok {
				return
			}
			if got := c.Fetch.FetchAhead(); got != tc.want {
				t.Errorf("fetch.ahead = %v, want %v", got, tc.want)
			}
		})
	}
}
