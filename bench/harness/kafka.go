package harness

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dedupstream/dedupstream/bench/workload"
	"github.com/dedupstream/dedupstream/config"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CaseKafka is the real-cluster case: dedupstream, the copy job and Kafka's
// own ProducerPerformance and ConsumerPerformance on one external cluster,
// each reached through one or more routes (with and without a network
// delay), interleaved rep by rep.
const CaseKafka = "kafka-cluster"

// Kafka's own tools, run from the broker's jars.
const (
	SysProducerPerf = "producer-perf" // ProducerPerformance, transactional
	SysConsumerPerf = "consumer-perf" // ConsumerPerformance, read_committed
)

// KafkaArm is one measured configuration of a real-cluster run; each rep runs
// every arm once, starting at a different arm each rep.
type KafkaArm struct {
	// Name labels the arm's rows ("dedupstream", "copy-job rtt1ms", ...).
	Name string
	// System is SysDedup, SysCopy, SysProducerPerf or SysConsumerPerf.
	System string
	// Route names the broker list in KafkaCase.Routes the arm talks to.
	Route string
	// Interval, FetchMaxBytes and BatchMaxBytes override the case's for
	// the two jobs (0: the case's); ProducerPerformance uses BatchMaxBytes
	// as batch.size and Interval as its transaction duration.
	Interval                     time.Duration
	FetchMaxBytes, BatchMaxBytes int
	// MaxInFlight and NoFetchAhead override the case's pipelining of the
	// two jobs (0, false: the case's).
	MaxInFlight  int
	NoFetchAhead bool
}

// KafkaCase is a real-cluster run.
type KafkaCase struct {
	// E2E gives the stream, records, reps, replication, the jobs' commit
	// interval, record cap, request sizes and state directory parent.
	E2E E2ECase
	// Routes maps a route name to a bootstrap list; Setup names the route
	// used to create topics, produce the stream and read outputs back.
	Routes map[string][]string
	Setup  string
	Arms   []KafkaArm
	// BrokerPIDs are the broker processes whose CPU time is measured.
	BrokerPIDs []int
	// KafkaLib is the directory of the broker's jars (kafka-tools among
	// them); Java the java command (default "java").
	KafkaLib, Java string
	// JobProc, when set, runs dedupstream and the copy job each in a
	// process of its own (see JobProcess); otherwise they run inside
	// dsbench and job CPU is dsbench's.
	JobProc *JobProcess
}

// RunKafka runs a real-cluster case and returns one result per arm and rep.
func RunKafka(ctx context.Context, c KafkaCase, p *Progress) ([]Result, error) {
	setup, ok := c.Routes[c.Setup]
	if !ok || len(setup) == 0 {
		return nil, fmt.Errorf("kafka: setup route %q has no brokers", c.Setup)
	}
	for _, a := range c.Arms {
		if len(c.Routes[a.Route]) == 0 {
			return nil, fmt.Errorf("kafka: arm %s: route %q has no brokers", a.Name, a.Route)
		}
	}
	g, err := workload.NewGenerator(c.E2E.Spec)
	if err != nil {
		return nil, err
	}
	spec := g.Spec()
	cl, err := kgo.NewClient(kgo.SeedBrokers(setup...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(engineBatch*2))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	prefix := fmt.Sprintf("dsbench-%d", time.Now().UnixNano()/1e6)
	raw := make([]string, spec.Topics)
	for i := range raw {
		raw[i] = fmt.Sprintf("%s-raw-%d", prefix, i)
	}
	if err := createTopics(ctx, cl, raw, spec.Partitions, c.E2E.Replication); err != nil {
		return nil, err
	}
	defer dropTopics(ctx, cl, p, raw...)
	ends, inBytes, err := produceStream(ctx, cl, g, raw, c.E2E.Records, p, CaseKafka)
	if err != nil {
		return nil, err
	}
	truth := g.Counts()
	p.Say("%s: input: %d records, %d bytes of keys and values, %d duplicates (%.1f%%), %d raw topics of %d partitions",
		CaseKafka, truth.Records, inBytes, truth.Duplicates(), 100*float64(truth.Duplicates())/float64(truth.Records), len(raw), spec.Partitions)

	var results []Result
	for rep := range c.E2E.Reps {
		for i := range c.Arms {
			a := c.Arms[(rep+i)%len(c.Arms)]
			name := fmt.Sprintf("%s-%d-%d", prefix, rep, (rep+i)%len(c.Arms))
			r := Result{Case: CaseKafka, System: a.Name, Rep: rep, Workload: spec, KeysInWindow: spec.KeysPerWindow,
				Records: truth.Records, DupRatio: float64(truth.Duplicates()) / float64(truth.Records), Route: a.Route}
			ec := c.E2E
			if a.Interval > 0 {
				ec.Interval = a.Interval
			}
			if a.FetchMaxBytes > 0 {
				ec.FetchMaxBytes = a.FetchMaxBytes
			}
			if a.BatchMaxBytes > 0 {
				ec.BatchMaxBytes = a.BatchMaxBytes
			}
			if a.MaxInFlight > 0 {
				ec.MaxInFlight = a.MaxInFlight
			}
			ec.NoFetchAhead = ec.NoFetchAhead || a.NoFetchAhead
			// Record the sizes in force, defaults resolved, so that arms
			// compare by what they sent.
			ec.FetchMaxBytes = cmp.Or(ec.FetchMaxBytes, int(config.DefaultFetchPartitionMaxBytes))
			ec.BatchMaxBytes = cmp.Or(ec.BatchMaxBytes, int(config.DefaultProduceBatchMaxBytes))
			r.IntervalMs, r.FetchMaxBytes, r.BatchMaxBytes = ec.Interval.Milliseconds(), ec.FetchMaxBytes, ec.BatchMaxBytes
			brokers := c.Routes[a.Route]
			if a.System == SysDedup || a.System == SysCopy {
				if err := createTopics(ctx, cl, []string{name, name + "-dlq"}, spec.Partitions, c.E2E.Replication); err != nil {
					return results, err
				}
			}
			cpu0, bcpu0 := selfCPU(), procsCPU(c.BrokerPIDs)
			var took time.Duration
			var childCPU float64
			switch {
			case c.JobProc != nil && (a.System == SysCopy || a.System == SysDedup):
				took, childCPU, err = c.JobProc.run(ctx, a.System, a.Name, ec, brokers, raw, name, cl, ends, p, &r)
				r.JobProcess = "own process"
				if c.JobProc.CPUs != "" {
					r.JobProcess += " on cores " + c.JobProc.CPUs
				}
			case a.System == SysCopy:
				took, err = runCopy(ctx, ec, brokers, raw, name, cl, ends, p, timedOut{})
			case a.System == SysDedup:
				took, err = runDedup(ctx, ec, brokers, raw, name, cl, ends, p, &r, timedOut{})
			case a.System == SysProducerPerf:
				err = createTopics(ctx, cl, []string{name}, spec.Partitions, c.E2E.Replication)
				if err == nil {
					err = c.producerPerf(ctx, ec, brokers, name, int(truth.Records), int(inBytes/truth.Records), &r)
				}
			case a.System == SysConsumerPerf:
				err = c.consumerPerf(ctx, brokers, prefix+"-raw-.*", name, int(truth.Records), &r)
			default:
				err = fmt.Errorf("unknown system %q", a.System)
			}
			if err != nil {
				return results, fmt.Errorf("%s rep %d: %w", a.Name, rep, err)
			}
			r.BrokerCPUSec = procsCPU(c.BrokerPIDs) - bcpu0
			if took > 0 {
				// The job ran in this process (its CPU is this process's)
				// or in a child of its own.
				r.JobCPUSec = selfCPU() - cpu0
				if r.JobProcess != "" {
					r.JobCPUSec = childCPU
				}
				r.Seconds = took.Seconds()
				r.RecordsPerSec = float64(truth.Records) / took.Seconds()
				r.MBPerSec = float64(inBytes) / 1e6 / took.Seconds()
				if err := checkOutput(ctx, setup, name, spec.Partitions, a.System, truth, &r); err != nil {
					return results, err
				}
			} else {
				// Kafka's tools check their own counts.
				r.Correct = workload.Verdict{Expected: truth.Records, Emitted: truth.Records}
				r.Note = "records/s and MB/s as the tool reports them; job CPU is the JVM's, start-up included"
			}
			if r.JobCPUSec > 0 {
				r.CPUUsPerRecord = r.JobCPUSec / float64(truth.Records) * 1e6
			}
			// ConsumerPerformance wrote nothing; the others wrote name (and
			// its DLQ, and a dedupstream job's partitions topic).
			if a.System != SysConsumerPerf {
				dropTopics(ctx, cl, p, name, name+"-dlq")
			}
			r.Valid = r.Correct.OK()
			p.Say("%s rep %d %s: %s records/s, %.1f MB/s, job CPU %.1fs, broker CPU %.1fs, %v", CaseKafka, rep, a.Name,
				count(uint64(r.RecordsPerSec)), r.MBPerSec, r.JobCPUSec, r.BrokerCPUSec, r.Correct)
			results = append(results, r)
		}
	}
	return results, nil
}

// java runs one of Kafka's tools and returns its standard output; the
// tool's CPU time goes into r.JobCPUSec.
func (c KafkaCase) java(ctx context.Context, r *Result, class string, args ...string) (string, error) {
	javaCmd := c.Java
	if javaCmd == "" {
		javaCmd = "java"
	}
	cmd := exec.CommandContext(ctx, javaCmd, append([]string{"-Xmx512m", "-cp", filepath.Join(c.KafkaLib, "*"), class}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ps := cmd.ProcessState; ps != nil {
		r.JobCPUSec = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	if err != nil {
		return "", fmt.Errorf("%s: %w: %s", class, err, lastLines(errb.String()+out.String(), 5))
	}
	return out.String(), nil
}

var producerPerfLine = regexp.MustCompile(`(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)`)

// producerPerf runs ProducerPerformance with a transactional id, batch.size
// BatchMaxBytes (default 1 MiB) and acks=all: records of size bytes (the
// stream's mean key+value size) to topic.
func (c KafkaCase) producerPerf(ctx context.Context, ec E2ECase, brokers []string, topic string, records, size int, r *Result) error {
	batch := ec.BatchMaxBytes
	if batch == 0 {
		batch = 1 << 20
	}
	out, err := c.java(ctx, r, "org.apache.kafka.tools.ProducerPerformance",
		"--topic", topic, "--num-records", strconv.Itoa(records), "--record-size", strconv.Itoa(size), "--throughput", "-1",
		"--transactional-id", topic, "--transaction-duration-ms", strconv.FormatInt(max(ec.Interval.Milliseconds(), 1), 10),
		"--producer-props", "bootstrap.servers="+strings.Join(brokers, ","), "acks=all", "batch.size="+strconv.Itoa(batch),
		"max.request.size="+strconv.Itoa(max(batch+(64<<10), 1<<20)))
	if err != nil {
		return err
	}
	r.RecordsPerSec, r.MBPerSec, err = parseProducerPerf(out, records)
	r.Seconds = float64(records) / r.RecordsPerSec
	return err
}

// parseProducerPerf reads ProducerPerformance's summary, its last line of
// the form "N records sent, R records/sec (M MB/sec), ...".
func parseProducerPerf(out string, records int) (rps, mbps float64, err error) {
	m := producerPerfLine.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return 0, 0, fmt.Errorf("ProducerPerformance: no summary line in: %s", lastLines(out, 3))
	}
	last := m[len(m)-1]
	if n, _ := strconv.Atoi(last[1]); n != records {
		return 0, 0, fmt.Errorf("ProducerPerformance sent %d records, want %d", n, records)
	}
	rps, _ = strconv.ParseFloat(last[2], 64)
	mbps, _ = strconv.ParseFloat(last[3], 64)
	return rps, mbps, nil
}

// consumerPerf runs ConsumerPerformance read_committed over the raw topics
// (include is a regular expression) and takes its fetch-time rates, which
// leave out the group join, as the harness's rates leave out start-up.
func (c KafkaCase) consumerPerf(ctx context.Context, brokers []string, include, group string, records int, r *Result) error {
	out, err := c.java(ctx, r, "org.apache.kafka.tools.ConsumerPerformance",
		"--bootstrap-server", strings.Join(brokers, ","), "--include", include, "--num-records", strconv.Itoa(records),
		"--group", group, "--timeout", "120000", "--command-property", "isolation.level=read_committed")
	if err != nil {
		return err
	}
	r.RecordsPerSec, r.MBPerSec, err = parseConsumerPerf(out, records)
	r.Seconds = float64(records) / r.RecordsPerSec
	return err
}

// parseConsumerPerf reads ConsumerPerformance's CSV: a header line
// (start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
// nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec)
// and a line of values. It returns the fetch-time rates in records/s and
// MB/s (the tool's MB are MiB).
func parseConsumerPerf(out string, records int) (rps, mbps float64, err error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var head, row []string
	for i, l := range lines {
		if strings.Contains(l, "fetch.nMsg.sec") && i+1 < len(lines) {
			head, row = strings.Split(l, ","), strings.Split(lines[i+1], ",")
		}
	}
	col := func(name string) (float64, error) {
		for i, h := range head {
			if strings.TrimSpace(h) == name && i < len(row) {
				return strconv.ParseFloat(strings.TrimSpace(row[i]), 64)
			}
		}
		return 0, fmt.Errorf("ConsumerPerformance: no %s column in: %s", name, lastLines(out, 3))
	}
	n, err := col("data.consumed.in.nMsg")
	if err != nil {
		return 0, 0, err
	}
	if int(n) < records {
		return 0, 0, fmt.Errorf("ConsumerPerformance read %d records, want %d", int(n), records)
	}
	if rps, err = col("fetch.nMsg.sec"); err != nil {
		return 0, 0, err
	}
	if mbps, err = col("fetch.MB.sec"); err != nil {
		return 0, 0, err
	}
	return rps, mbps * 1.048576, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], " | ")
}

// selfCPU is this process's user+system CPU time in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ruCPU(&ru)
}

// procsCPU sums the user+system CPU seconds of pids from /proc (0 for a pid
// it cannot read).
func procsCPU(pids []int) float64 {
	var s float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which is in parentheses and may
		// hold spaces: state is field 3, utime 14, stime 15.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		s += (ut + st) / clockTicks
	}
	return s
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100
