package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/filter"
	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/statestore"
)

const inspectSynopsis = `inspect (--state DIR | --config FILE) [--partitions 0,1,...] [key PART...]

Show what a job's state directory holds, per partition: the store's commit
sequence, current generation and mode, the checkpoint (input offsets and the
next output offset), keys (counted exactly) and estimated on-disk bytes per
generation with the record-time span each covers, and the Bloom front from
the snapshot a clean stop writes (fill and estimated false-positive rate per
generation).

"inspect ... key PART..." looks a business key up in every partition: whether
it is present, its generation (so when it was first seen, in record time, and
until when it is remembered) and its version in version mode. A composite key
is given as its parts, in the order of dedup.key. Exit 1 if a key is absent.

The stores are opened read-only. Pebble locks a store while a job runs, so
inspect refuses a running job's state: stop it, or inspect a copy. With
--config, state.dir, dedup.window and dedup.generations come from the job
file; otherwise --window and --generations give the time spans.`

func cmdInspect(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("inspect", inspectSynopsis, stdout, stderr)
	state := fs.String("state", "", "the job's state `DIR` (its state.dir)")
	cfgPath := fs.String("config", "", "job config `FILE` supplying state.dir, window and generations")
	parts := fs.String("partitions", "", "only these `PARTITIONS` (comma-separated; default every partition-N directory)")
	window := fs.Duration("window", 24*time.Hour, "the job's dedup.window (without --config)")
	gens := fs.Int("generations", 4, "the job's dedup.generations (without --config)")
	level := logLevelFlag(fs, "warn")
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	var keys []string
	if rest := fs.Args(); len(rest) > 0 {
		if rest[0] != "key" {
			fmt.Fprintf(stderr, "dedupstream inspect: unexpected arguments %q (want: key PART...)\n", rest)
			return exitUsage
		}
		// Flags may follow "key" too.
		if code, done := parse(fs, rest[1:], stdout); done {
			return code
		}
		keys = fs.Args()
		if len(keys) == 0 {
			fmt.Fprintln(stderr, "dedupstream inspect: key: want the key (or its parts)")
			return exitUsage
		}
	}
	in := inspector{window: *window, gens: *gens, log: newLogger(config.Log{Level: *level, Format: "auto"}, stderr)}
	if *cfgPath != "" {
		cfg, err := config.Load(*cfgPath)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		pc, err := cfg.Pipeline()
		if err != nil {
			fmt.Fprintln(stderr, err)
			return exitUsage
		}
		in.root, in.window, in.gens = cfg.State.Dir, pc.Window, pc.Generations
	}
	if *state != "" {
		in.root = *state
	}
	if in.root == "" || in.window <= 0 || in.gens < 1 {
		fmt.Fprintln(stderr, "dedupstream inspect: want --state DIR or --config FILE, --window > 0, --generations >= 1")
		return exitUsage
	}
	dirs, err := in.partitions(splitList(*parts))
	if err != nil {
		fmt.Fprintf(stderr, "dedupstream inspect: %v\n", err)
		return exitUsage
	}
	if keys != nil {
		found, err := in.lookup(stdout, dirs, keys)
		if err != nil {
			fmt.Fprintf(stderr, "dedupstream inspect: %v\n", err)
			return exitFailure
		}
		if !found {
			return exitFailure
		}
		return exitOK
	}
	if err := in.stats(stdout, dirs); err != nil {
		fmt.Fprintf(stderr, "dedupstream inspect: %v\n", err)
		return exitFailure
	}
	return exitOK
}

type inspector struct {
	root   string
	window time.Duration
	gens   int
	log    *slog.Logger // the stores' (Pebble's) log lines, at --log-level
}

// stageDir is one partition's state directory.
type stageDir struct {
	p   int
	dir string
}

// partitions lists the stage directories under the root, or the asked-for
// ones, in partition order.
func (in *inspector) partitions(only []string) ([]stageDir, error) {
	if len(only) > 0 {
		var out []stageDir
		for _, s := range only {
			p, err := strconv.Atoi(s)
			if err != nil || p < 0 {
				return nil, fmt.Errorf("--partitions: want partition numbers, got %q", s)
			}
			dir := job.StateDir(in.root, p)
			if _, err := os.Stat(dir); err != nil {
				return nil, fmt.Errorf("partition %d: %w", p, err)
			}
			out = append(out, stageDir{p, dir})
		}
		return out, nil
	}
	entries, err := os.ReadDir(in.root)
	if err != nil {
		return nil, err
	}
	var out []stageDir
	for _, e := range entries {
		n, ok := strings.CutPrefix(e.Name(), "partition-")
		p, err := strconv.Atoi(n)
		if ok && err == nil && e.IsDir() && job.StateDir(in.root, p) == filepath.Join(in.root, e.Name()) {
			out = append(out, stageDir{p, filepath.Join(in.root, e.Name())})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no partition-N state directories", in.root)
	}
	slices.SortFunc(out, func(a, b stageDir) int { return a.p - b.p })
	return out, nil
}

// openStore opens a stage's store read-only, with an error that says what to do
// when a job holds it.
func (in *inspector) openStore(sd stageDir) (*statestore.Store, error) {
	st, err := statestore.Open(filepath.Join(sd.dir, pipeline.StoreDir), statestore.Options{ReadOnly: true, CacheSize: 8 << 20, MemTableSize: 1 << 20, Logger: in.log})
	switch {
	case errors.Is(err, statestore.ErrLocked):
		return nil, fmt.Errorf("partition %d: %s is open in another process (a running job holds Pebble's lock): stop the job first, or inspect a copy of the directory", sd.p, sd.dir)
	case err != nil:
		return nil, fmt.Errorf("partition %d: %w", sd.p, err)
	}
	return st, nil
}

// span is the record time one generation covers.
func (in *inspector) span() time.Duration { return in.window / time.Duration(in.gens) }

func (in *inspector) genStart(g uint64) time.Time {
	return time.UnixMilli(int64(g) * in.span().Milliseconds()).UTC()
}

func (in *inspector) stats(w io.Writer, dirs []stageDir) error {
	var total uint64
	for _, sd := range dirs {
		n, err := in.stageStats(w, sd)
		if err != nil {
			return err
		}
		total += n
	}
	fmt.Fprintf(w, "total: %d keys in %d partitions\n", total, len(dirs))
	return nil
}

func (in *inspector) stageStats(w io.Writer, sd stageDir) (uint64, error) {
	st, err := in.openStore(sd)
	if err != nil {
		return 0, err
	}
	defer st.Close()
	state := st.State()
	mode := "first"
	if st.VersionMode() {
		mode = "version"
	}
	fmt.Fprintf(w, "partition %d (%s)\n", sd.p, sd.dir)
	fmt.Fprintf(w, "  store: commit seq %d, generation %d, mode %s, %s on disk\n", state.Seq, state.Generation, mode, bytesString(st.DiskUsage()))
	ck, err := job.DecodeCheckpoint(state.Checkpoint)
	switch {
	case err != nil:
		fmt.Fprintf(w, "  checkpoint: unreadable: %v\n", err)
	case len(state.Checkpoint) == 0:
		fmt.Fprintln(w, "  checkpoint: none (nothing committed yet)")
	default:
		var ins []string
		for _, i := range ck.Inputs {
			ins = append(ins, fmt.Sprintf("%s/%d at %d", i.Topic, i.Partition, i.Offset))
		}
		fmt.Fprintf(w, "  checkpoint: next output offset %d of %s; input %s\n", ck.Output, cmp.Or(ck.OutputTopic, "the output (topic not recorded)"), strings.Join(ins, ", "))
		if ck.Partitions > 0 || ck.Dedup != "" {
			fmt.Fprintf(w, "  written under: %d partitions; dedup %s\n", ck.Partitions, cmp.Or(ck.Dedup, "settings not recorded"))
		}
		if len(ck.Marks) > 0 {
			marks := make([]string, len(ck.Marks))
			for i, k := range ck.Marks {
				marks[i] = fmt.Sprintf("%d@%d", k.Gen, k.Offset)
			}
			fmt.Fprintf(w, "  generation marks (generation@output offset, generations of %v): %s\n",
				time.Duration(ck.MarksSpan)*time.Millisecond, strings.Join(marks, " "))
		}
	}
	gens, err := st.Generations()
	if err != nil {
		return 0, fmt.Errorf("partition %d: %w", sd.p, err)
	}
	var total uint64
	fmt.Fprintf(w, "  %-12s %4s %10s %12s  %s\n", "generation", "age", "keys", "bytes", "record time covered")
	for _, g := range gens {
		var n uint64
		if err := st.ScanGeneration(g.Gen, func(partition.Hash, uint64) error { n++; return nil }); err != nil {
			return 0, fmt.Errorf("partition %d: %w", sd.p, err)
		}
		total += n
		age := "-"
		if g.Gen <= state.Generation {
			age = strconv.FormatUint(state.Generation-g.Gen, 10)
		}
		fmt.Fprintf(w, "  %-12d %4s %10d %12s  %s .. %s\n", g.Gen, age, n, bytesString(g.Bytes),
			in.genStart(g.Gen).Format(time.RFC3339), in.genStart(g.Gen+1).Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  keys: %d\n", total)
	in.bloomStats(w, sd, state.Seq)
	return total, nil
}

// bloomStats prints the Bloom front from the stage's snapshot, which exists
// after a clean stop (the job reads and deletes it at start).
func (in *inspector) bloomStats(w io.Writer, sd stageDir, seq uint64) {
	path := filepath.Join(sd.dir, pipeline.SnapshotFile)
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(w, "  bloom: no snapshot (written at a clean stop; the job rebuilds the filter from the store otherwise)")
		return
	}
	if err != nil {
		fmt.Fprintf(w, "  bloom: %v\n", err)
		return
	}
	cfg, err := filter.ReadConfig(file)
	file.Close()
	var f *filter.Filter
	if err == nil {
		f, err = filter.LoadFile(path, cfg)
	}
	if err != nil {
		fmt.Fprintf(w, "  bloom: snapshot unusable (the job rebuilds the filter): %v\n", err)
		return
	}
	stale := ""
	if f.Tag() != seq {
		stale = fmt.Sprintf(", stale: written at commit %d, the store is at %d (the job rebuilds it)", f.Tag(), seq)
	}
	fmt.Fprintf(w, "  bloom: snapshot of %d generations x %d keys at target false-positive rate %g, %.1f bytes/key, estimated false-positive rate now %.3g%s\n",
		cfg.Generations, cfg.KeysPerGeneration, cfg.FalsePositiveRate, f.BytesPerKey(), f.EstimatedFalsePositiveRate(), stale)
	for _, g := range f.Stats() {
		fmt.Fprintf(w, "    generation %-12d added %10d  fill %6.3f%%  false-positive rate %.3g\n", g.Gen, g.Added, 100*g.FillRatio, g.EstimatedFPR)
	}
}

// lookup looks every key (or the one composite key made of parts) up in
// every partition and reports whether all were found.
func (in *inspector) lookup(w io.Writer, dirs []stageDir, parts []string) (bool, error) {
	bparts := make([][]byte, len(parts))
	for i, p := range parts {
		bparts[i] = []byte(p)
	}
	key := partition.EncodeKey(nil, bparts...)
	h := partition.HashKey(key)
	found := false
	for _, sd := range dirs {
		st, err := in.openStore(sd)
		if err != nil {
			return false, err
		}
		gens, err := st.Generations()
		if err != nil {
			st.Close()
			return false, fmt.Errorf("partition %d: %w", sd.p, err)
		}
		probe := make([]uint64, 0, len(gens))
		for i := len(gens) - 1; i >= 0; i-- {
			probe = append(probe, gens[i].Gen) // newest first
		}
		gen, version, ok, err := st.Lookup(h, probe)
		mode := st.VersionMode()
		st.Close()
		if err != nil {
			return false, fmt.Errorf("partition %d: %w", sd.p, err)
		}
		if !ok {
			continue
		}
		found = true
		fmt.Fprintf(w, "key %q: present in partition %d, generation %d: first seen between %s and %s (record time), remembered until about %s",
			key, sd.p, gen, in.genStart(gen).Format(time.RFC3339), in.genStart(gen+1).Format(time.RFC3339),
			in.genStart(gen+uint64(in.gens)+1).Format(time.RFC3339))
		if mode {
			fmt.Fprintf(w, ", version %d", version)
		}
		fmt.Fprintln(w)
	}
	if !found {
		fmt.Fprintf(w, "key %q: not present in partitions %v\n", key, partitionNumbers(dirs))
	}
	return found, nil
}

func partitionNumbers(dirs []stageDir) []int {
	out := make([]int, len(dirs))
	for i, d := range dirs {
		out[i] = d.p
	}
	return out
}

func bytesString(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
