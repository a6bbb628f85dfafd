package pipeline

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/dedupstream/dedupstream/statestore"
)

// The kill -9 restart test: a child process commits keys before and after
// a periodic Bloom snapshot, with a store index small enough that the keys
// after it land in memory, in runs flushed since and in runs merged since,
// and then dies of SIGKILL. The restarted stage must know every committed
// key: each repeat must be dropped, none emitted.
const (
	killWindowKeys = 40_000 // keys per window: generations rotate under the stream
	killBefore     = 8_000  // keys committed before the snapshot
	killAfter      = 24_000 // keys committed after it, then kill -9
	killBatch      = 1_000
)

// killBatchOf returns the records of keys from..from+n-1, distinct and
// stamped at a steady rate through the window.
func killBatchOf(from, n int) []Record {
	recs := make([]Record, n)
	stepMs := benchWindow.Milliseconds() / killWindowKeys
	for i := range recs {
		k := from + i
		recs[i].Key = []byte("order-" + strconv.Itoa(k))
		recs[i].TimestampMs = benchEpochMs + int64(k)*stepMs
	}
	return recs
}

func killStageOptions(log *slog.Logger) Options {
	// 32 KiB: an index of ~1.2k keys, so the keys after the snapshot make
	// ~17 runs and tier merges.
	o := Options{Clock: benchClock, Logger: log, Store: statestore.Options{MemTableSize: 32 << 10}}
	if log != nil {
		o.Store.Logger = log
	}
	return o
}

func TestRestartAfterKill9KnowsEveryCommittedKey(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartKill9Child$")
	cmd.Env = append(os.Environ(), "RESTART_KILL9_DIR="+dir)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want death by SIGKILL; output:\n%s", err, stderr.String())
	}

	var logs bytes.Buffer
	st, err := Open(dir, benchConfig(killWindowKeys), killStageOptions(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The point of the test is the catch-up from the periodic snapshot,
	// not a full rebuild (which would pass for another reason).
	if !strings.Contains(logs.String(), "bloom front restored from an older snapshot") {
		t.Fatalf("the restart did not catch up from the periodic snapshot; log:\n%s", logs.String())
	}
	var total Counts
	var out []Decision
	for done := 0; done < killBefore+killAfter; done += killBatch {
		var c Counts
		if out, c, err = st.Process(killBatchOf(done, killBatch), out[:0]); err != nil {
			t.Fatal(err)
		}
		total.Add(c)
		for i, d := range out {
			if d.Verdict != DropHistory {
				t.Fatalf("key %d, committed before the kill, decided %v after the restart; log:\n%s", done+i, d.Verdict, logs.String())
			}
		}
	}
	if total.DroppedHistory != killBefore+killAfter {
		t.Fatalf("dropped %d of %d committed keys as repeats: %+v", total.DroppedHistory, killBefore+killAfter, total)
	}
}

// TestRestartKill9Child is the child of
// TestRestartAfterKill9KnowsEveryCommittedKey; without its environment it
// does nothing.
func TestRestartKill9Child(t *testing.T) {
	dir := os.Getenv("RESTART_KILL9_DIR")
	if dir == "" {
		t.Skip("only run by TestRestartAfterKill9KnowsEveryCommittedKey")
	}
	st, err := Open(dir, benchConfig(killWindowKeys), killStageOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	var out []Decision
	for done := 0; done < killBefore+killAfter; done += killBatch {
		if done == killBefore {
			if err := st.SaveSnapshot(); err != nil {
				t.Fatal(err)
			}
		}
		var c Counts
		if out, c, err = st.Process(killBatchOf(done, killBatch), out[:0]); err != nil {
			t.Fatal(err)
		}
		if c.Emitted != killBatch {
			t.Fatalf("emitted %d of %d new keys: %+v", c.Emitted, killBatch, c)
		}
		if err := st.Commit(nil); err != nil {
			t.Fatal(err)
		}
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}
