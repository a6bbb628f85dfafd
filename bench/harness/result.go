package harness

import (
	"encoding/json"
	"os"
	"slices"
	"time"

	"github.com/dedupstream/dedupstream/bench/workload"
)

// Systems measured. Every case of a run measures dedupstream and the
// baselines on the same stream.
const (
	SysDedup = "dedupstream"
	// SysDedupNoWAL is the stage with the store's WAL off: a crash then
	// loses the memtable and the job restores it from the output topic.
	SysDedupNoWAL = "dedupstream-nowal"
	SysMap        = "map-ceiling"
	SysRedis      = "redis-setnx"
	SysCopy       = "copy-job"
)

// Cases.
const (
	CaseEngine      = "engine"       // stage alone on a real Pebble dir, no broker
	CaseSweep       = "sweep"        // engine at growing keys in the window, with restart
	CaseE2EEmbedded = "e2e-embedded" // the job on the embedded broker
	CaseE2EExternal = "e2e-external" // the job on external brokers
)

// Latency summarises per-operation latencies in microseconds.
type Latency struct {
	// Unit says what one operation is: a batch of records through the
	// stage (Process and Commit), or one Redis round trip.
	Unit string  `json:"unit"`
	P50  float64 `json:"p50_us"`
	P90  float64 `json:"p90_us"`
	P95  float64 `json:"p95_us"`
	P99  float64 `json:"p99_us"`
	Max  float64 `json:"max_us"`
}

func latencyOf(unit string, d []time.Duration) *Latency {
	if len(d) == 0 {
		return nil
	}
	slices.Sort(d)
	q := func(p float64) float64 {
		return float64(d[min(len(d)-1, int(p*float64(len(d))))].Nanoseconds()) / 1e3
	}
	return &Latency{Unit: unit, P50: q(0.5), P90: q(0.9), P95: q(0.95), P99: q(0.99), Max: q(1)}
}

// Result is one measured run of one system on one stream.
type Result struct {
	Case   string `json:"case"`
	System string `json:"system"`
	Rep    int    `json:"rep"`
	// Workload is the stream's spec; KeysInWindow is Workload.KeysPerWindow.
	Workload     workload.Spec `json:"workload"`
	KeysInWindow int           `json:"keys_in_window"`
	// Records is the number of timed records; DupRatio the share of them
	// that were duplicates (by the ground truth).
	Records       uint64   `json:"records"`
	DupRatio      float64  `json:"dup_ratio"`
	Seconds       float64  `json:"seconds"`
	RecordsPerSec float64  `json:"records_per_sec"`
	Latency       *Latency `json:"latency,omitempty"`
	// Paced is set by the latency cases: the rate asked for and achieved.
	Paced *Paced `json:"paced,omitempty"`
	// RSS of the whole process: at the start of the case and its peak.
	// MemBytesPerKey is (peak - start) / keys in the window;
	// MemBeyondBloomPerKey takes the Bloom front's bytes off first.
	RSSStartBytes        uint64  `json:"rss_start_bytes,omitempty"`
	RSSPeakBytes         uint64  `json:"rss_peak_bytes,omitempty"`
	MemBytesPerKey       float64 `json:"mem_bytes_per_key,omitempty"`
	MemBeyondBloomPerKey float64 `json:"mem_beyond_bloom_bytes_per_key,omitempty"`
	// GoHeapSysBytes is the Go heap's memory from the OS and
	// GoHeapAllocBytes its live-and-not-yet-collected part at the end of
	// the timed records: the Bloom front lives in the Go heap, Pebble's
	// memtables and block cache outside it.
	GoHeapSysBytes   uint64 `json:"go_heap_sys_bytes,omitempty"`
	GoHeapAllocBytes uint64 `json:"go_heap_alloc_bytes,omitempty"`
	// DiskBytesPerKey is the state directory's size per key in the window
	// at the end of the timed part, the stage still open: sstables, WAL and
	// files not yet deleted, what a running job occupies.
	DiskBytesPerKey float64 `json:"disk_bytes_per_key,omitempty"`
	// BloomBytesPerKey is the Bloom front's memory per key of a full
	// window; BloomFPRate the measured share of new keys it called "maybe"
	// (each one a store read), BloomFPRateEst its own estimate from the bits
	// set.
	BloomBytesPerKey    float64 `json:"bloom_bytes_per_key,omitempty"`
	BloomFPRate         float64 `json:"bloom_fp_rate"`
	BloomFPRateEst      float64 `json:"bloom_fp_rate_est,omitempty"`
	StoreReadsPerRecord float64 `json:"store_reads_per_record,omitempty"`
	// Restart-to-ready, Open of the full stage: after kill -9 (WAL replay
	// and a filter rebuild by scanning the store as ingest left it), the same
	// again right after, and from the Bloom snapshot of a clean Close.
	ReadyCrashSec float64 `json:"ready_crash_s,omitempty"`
	// CloseSec is the Close of the running full stage (Bloom snapshot
	// written, store closed): what a graceful shutdown costs.
	CloseSec         float64 `json:"close_s,omitempty"`
	ReadyRebuildSec  float64 `json:"ready_rebuild_s,omitempty"`
	ReadySnapshotSec float64 `json:"ready_snapshot_s,omitempty"`
	// Route names the broker list a real-cluster arm used (with or without
	// the network delay). MBPerSec counts key and value bytes of the input.
	// JobCPUSec is the CPU time of the job (this process, or the JVM of
	// Kafka's tools) over the timed part, BrokerCPUSec that of the brokers,
	// CPUUsPerRecord the job's per input record.
	Route          string  `json:"route,omitempty"`
	IntervalMs     int64   `json:"commit_interval_ms,omitempty"`
	FetchMaxBytes  int     `json:"fetch_max_bytes,omitempty"`
	BatchMaxBytes  int     `json:"batch_max_bytes,omitempty"`
	MBPerSec       float64 `json:"mb_per_sec,omitempty"`
	JobCPUSec      float64 `json:"job_cpu_s,omitempty"`
	BrokerCPUSec   float64 `json:"broker_cpu_s,omitempty"`
	CPUUsPerRecord float64 `json:"cpu_us_per_record,omitempty"`
	// StageCPUUsPerRecord and TailCPUUsPerRecord split an engine case's
	// process CPU (CPUUsPerRecord: over the timed records, whatever ran)
	// into the part inside the stage's calls and add what the process used
	// after the last record until it was quiet: the flushes and merges the
	// store still owed (see spanCPU).
	StageCPUUsPerRecord float64 `json:"stage_cpu_us_per_record,omitempty"`
	TailCPUUsPerRecord  float64 `json:"tail_cpu_us_per_record,omitempty"`
	// JobProcess says where a job ran when not inside the harness: "own
	// process" or "own process on cores N" (see JobProcess).
	JobProcess string `json:"job_process,omitempty"`
	// Correctness against the ground truth of the stream. A result with
	// anything escaped, lost or foreign is not Valid.
	Correct workload.Verdict `json:"correctness"`
	Valid   bool             `json:"valid"`
	Note    string           `json:"note,omitempty"`
}

// Run is everything one harness invocation measured.
type Run struct {
	Started string   `json:"started"`
	Host    Host     `json:"host"`
	Command string   `json:"command"`
	Results []Result `json:"results"`
}

// Host describes the machine.
type Host struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go"`
	OS        string `json:"os"`
	Arch      string `json:"arch"`
	Model     string `json:"cpu_model,omitempty"`
}

// WriteJSON writes the run to path.
func (r *Run) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
