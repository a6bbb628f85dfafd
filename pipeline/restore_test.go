package pipeline

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/statestore"
)

// TestEndRestoreIsDurable: once EndRestore returns, a crash (a crash clone
// of the store's file system keeping no unsynced data) loses nothing of the
// restore: the store reopens at the last batch's checkpoint and every
// restored key is a duplicate. Without EndRestore the loads sit in memory
// (fewer keys than one index) and the clone holds none of them.
func TestEndRestoreIsDurable(t *testing.T) {
	cfg := Config{Window: time.Hour, Generations: 4, Key: []partition.Field{{Source: partition.SourceJSON, Name: "k"}}}
	cfg.ApplyDefaults()
	now := time.UnixMilli(1_700_000_000_000)
	clock := func() time.Time { return now }
	fs := vfs.NewCrashableMem()
	dir := t.TempDir()
	// The directory exists, durably, before the stage starts, as a real
	// state directory does.
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for d := dir; ; d = fs.PathDir(d) {
		f, err := fs.OpenDir(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(f.Sync(), f.Close()); err != nil {
			t.Fatal(err)
		}
		if d == fs.PathDir(d) {
			break
		}
	}
	opts := Options{Clock: clock, Store: statestore.Options{FS: fs}}
	s, err := Open(dir, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	const batches, perBatch = 5, 300
	recs := func(b int) []Record {
		out := make([]Record, perBatch)
		for i := range out {
			out[i] = Record{Record: partition.Record{Value: fmt.Appendf(nil, `{"k":"o-%d-%d"}`, b, i)}, TimestampMs: now.UnixMilli()}
		}
		return out
	}
	var last []byte
	for b := range batches {
		last = fmt.Appendf(nil, "checkpoint-%d", b)
		if err := s.Restore(recs(b), last); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.EndRestore(); err != nil {
		t.Fatal(err)
	}
	crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	s.Close()

	opts.Store.FS = crashed
	r, err := Open(dir, cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := string(r.State().Checkpoint); got != string(last) {
		t.Fatalf("after a crash the store is at checkpoint %q, want the restore's last %q", got, last)
	}
	for b := range batches {
		decs, _, err := r.Process(recs(b), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range decs {
			if d.Verdict == Emit {
				t.Fatalf("batch %d record %d: restored key emitted again after the crash", b, i)
			}
		}
		r.Abort()
	}
}

// TestRestoreSteadyStateAllocatesNothing: once its buffers have grown,
// keying a batch of output records (RestoreKeyer.Key) and recording it
// (RestoreKeyed: Bloom adds and Store.LoadHashes) allocates nothing per
// record; the load buffer takes a new 4 MiB chunk every 128k keys, and the
// store hands a full buffer to its flusher (a few objects) every index's
// worth of keys.
func TestRestoreSteadyStateAllocatesNothing(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := openTestStage(t, Config{Key: []partition.Field{{Source: partition.SourceJSON, Name: "k"}}}, func() time.Time { return now })
	const n = 1000
	k := s.NewRestoreKeyer()
	var b Restored
	in := make([]Record, n)
	next := 0
	batch := func() {
		for i := range in {
			v := strconv.AppendInt(append(in[i].Value[:0], `{"k":"o-`...), int64(next), 10)
			in[i] = Record{Record: partition.Record{Value: append(v, `"}`...)}, TimestampMs: now.UnixMilli()}
			next++
		}
		k.Key(in, &b)
		if err := s.RestoreKeyed(&b, []byte("cp")); err != nil {
			t.Fatal(err)
		}
	}
	for range 300 { // past the load buffer's first chunk, which grows by appends
		batch()
	}
	const runs = 50
	perBatch := testing.AllocsPerRun(runs, batch)
	// 50 batches of 1000 keys reach at most one new chunk: below one
	// allocation per batch unless something allocates per record or per
	// batch.
	if perBatch >= 0.5 {
		t.Fatalf("%.2f allocations per batch of %d records, want none but a chunk now and then", perBatch, n)
	}
	if err := s.EndRestore(); err != nil {
		t.Fatal(err)
	}
}

// TestRestoreLeavesOutUnkeyed: output records without a business key under
// the stage's configuration (emitted under another dedup.key, or written by
// another producer) are left out of a restore and counted; the others are
// restored, and nothing of an unkeyed record's slot reaches the store, not
// even the hash a reused batch held there before.
func TestRestoreLeavesOutUnkeyed(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s := openTestStage(t, Config{Key: []partition.Field{{Source: partition.SourceJSON, Name: "k"}}}, func() time.Time { return now })
	rec := func(v string) Record {
		return Record{Record: partition.Record{Value: []byte(v)}, TimestampMs: now.UnixMilli()}
	}
	const n = 600
	var stale, mixed, kept []Record
	for i := range n {
		stale = append(stale, rec(fmt.Sprintf(`{"k":"stale-%d"}`, i)))
		switch i % 3 {
		case 0:
			mixed = append(mixed, rec(`{"other":1}`))
		case 1:
			mixed = append(mixed, rec(`not json`))
		default:
			r := rec(fmt.Sprintf(`{"k":"kept-%d"}`, i))
			mixed, kept = append(mixed, r), append(kept, r)
		}
	}
	k := s.NewRestoreKeyer()
	var b Restored
	k.Key(stale, &b) // leaves its hashes in b's slots
	k.Key(mixed, &b)
	if b.Unkeyed() != 2*n/3 {
		t.Fatalf("Unkeyed = %d, want %d", b.Unkeyed(), 2*n/3)
	}
	if err := s.RestoreKeyed(&b, []byte("cp")); err != nil {
		t.Fatal(err)
	}
	if err := s.EndRestore(); err != nil {
		t.Fatal(err)
	}
	if got := s.RestoreUnkeyed(); got != 2*n/3 {
		t.Errorf("RestoreUnkeyed = %d, want %d", got, 2*n/3)
	}
	for name, tc := range map[string]struct {
		in   []Record
		want Verdict
	}{"restored keys": {kept, DropHistory}, "keys only a reused slot held": {stale, Emit}} {
		decs, _, err := s.Process(tc.in, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range decs {
			if d.Verdict != tc.want {
				t.Fatalf("%s: record %d: verdict %v, want %v", name, i, d.Verdict, tc.want)
			}
		}
		s.Abort()
	}
}
