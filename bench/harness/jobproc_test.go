package harness

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/bench/workload"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestMain lets this test binary serve as the job child of JobProcess, as
// dsbench does (-child SPEC).
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "-"+ChildFlag {
		os.Exit(RunChild(os.Args[2]))
	}
	os.Exit(m.Run())
}

// TestJobProcessOnTheEmbeddedBroker runs the real-cluster case with both
// jobs in processes of their own against an embedded broker: each output
// must be exact (read back by kgo), job CPU must be the child's (> 0, and
// said so in JobProcess), and the child must be gone afterwards.
func TestJobProcessOnTheEmbeddedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and two job processes")
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	c := KafkaCase{
		E2E: E2ECase{
			Spec:    workload.Spec{Seed: 7, KeysPerWindow: 60_000, DupRatio: 0.2, Partitions: 2, Topics: 1, PayloadBytes: 40},
			Records: 15_000, Reps: 1, Interval: 50 * time.Millisecond, MaxRecords: 5_000, Replication: 1, Dir: t.TempDir(),
		},
		Routes:  map[string][]string{"k": cluster.ListenAddrs()},
		Setup:   "k",
		Arms:    []KafkaArm{{Name: "copy-job", System: SysCopy, Route: "k"}, {Name: "dedupstream", System: SysDedup, Route: "k"}},
		JobProc: &JobProcess{Exe: os.Args[0]},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rs, err := RunKafka(ctx, c, quiet())
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	for _, r := range rs {
		if !r.Valid || r.JobCPUSec <= 0 || r.CPUUsPerRecord <= 0 || r.JobProcess != "own process" {
			t.Errorf("%s: valid %v (%v), job CPU %.3fs, %.2f us/record, job process %q", r.System, r.Valid, r.Correct, r.JobCPUSec, r.CPUUsPerRecord, r.JobProcess)
		}
	}
	entries, _ := os.ReadDir(c.E2E.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "dsbench-child-") {
			t.Errorf("child directory %s left behind", e.Name())
		}
	}
}
