package harness

import (
	"math"
	"strings"
	"testing"
)

func TestParseProducerPerf(t *testing.T) {
	out := "12001 records sent, 2400.2 records/sec (0.26 MB/sec), 900.1 ms avg latency, 1500.0 ms max latency.\n" +
		"40000 records sent, 6031.5 records/sec (0.66 MB/sec), 850.20 ms avg latency, 1802.00 ms max latency, 820 ms 50th, 1700 ms 95th, 1800 ms 99th, 1802 ms 99.9th.\n"
	rps, mb, err := parseProducerPerf(out, 40000)
	if err != nil || rps != 6031.5 || mb != 0.66 {
		t.Fatalf("got %v records/s, %v MB/s, %v; want the last line's 6031.5 and 0.66", rps, mb, err)
	}
	if _, _, err := parseProducerPerf(out, 50000); err == nil || !strings.Contains(err.Error(), "sent 40000 records, want 50000") {
		t.Errorf("a short run: %v", err)
	}
	if _, _, err := parseProducerPerf("Exception in thread main", 1); err == nil {
		t.Error("no summary line: no error")
	}
}

func TestParseConsumerPerf(t *testing.T) {
	out := "WARN something\n" +
		"start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n" +
		"2026-12-01 11:21:40:100, 2026-12-01 11:21:50:100, 47.6837, 4.7684, 400000, 40000.0, 3000, 7000, 6.8120, 57142.8571\n"
	rps, mb, err := parseConsumerPerf(out, 400000)
	if err != nil || rps != 57142.8571 || math.Abs(mb-6.8120*1.048576) > 1e-9 {
		t.Fatalf("got %v records/s, %v MB/s, %v; want the fetch-time rates 57142.8571 and 6.812 MiB/s in MB/s", rps, mb, err)
	}
	if _, _, err := parseConsumerPerf(out, 400001); err == nil {
		t.Error("fewer records than asked for: no error")
	}
}

func TestKafkaRatios(t *testing.T) {
	res := func(arm, route string, rep int, rps float64, fetch int) Result {
		return Result{Case: CaseKafka, System: arm, Route: route, Rep: rep, RecordsPerSec: rps, FetchMaxBytes: fetch, BatchMaxBytes: 1 << 20, IntervalMs: 100}
	}
	var rs []Result
	// Per rep, dedupstream runs at 0.5x, 0.9x, 1.0x the copy job: the
	// median of the ratios is 0.9x, not the ratio of the medians (0.8x).
	for rep, v := range [][6]float64{{100, 50, 40, 60, 30, 60}, {50, 45, 40, 40, 20, 30}, {40, 40, 40, 36, 30, 42}} {
		rs = append(rs, res("copy-job", "relay", rep, v[0], 1<<20), res("dedupstream", "relay", rep, v[1], 1<<20),
			res("producer-perf", "relay", rep, v[2], 1<<20), res("dedupstream rtt", "rtt", rep, v[3], 1<<20),
			res("copy-job rtt", "rtt", rep, v[4], 1<<20), res("dedupstream fetch=4MiB", "relay", rep, v[5], 4<<20))
	}
	got := map[string]float64{}
	for _, k := range KafkaRatios(rs) {
		got[k.A+" / "+k.B] = math.Round(k.Median*1000) / 1000
	}
	want := map[string]float64{
		"dedupstream / copy-job":                   0.9,
		"copy-job / producer-perf":                 1.25,
		"dedupstream rtt / dedupstream":            0.9,
		"dedupstream rtt / copy-job rtt":           2,
		"copy-job rtt / copy-job":                  0.4,
		"dedupstream fetch=4MiB / dedupstream":     1.05,
		"dedupstream fetch=4MiB / copy-job":        0, // other sizes: no pair
		"dedupstream fetch=4MiB / dedupstream rtt": 0,
	}
	for pair, w := range want {
		if got[pair] != w {
			t.Errorf("%s = %v, want %v", pair, got[pair], w)
		}
	}
	if len(got) != 6 {
		t.Errorf("pairs %v, want the 6 non-zero ones above", got)
	}
}
