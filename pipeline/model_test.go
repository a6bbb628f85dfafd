package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/dedupstream/dedupstream/partition"
)

// refModel is the reference the stage is checked against: plain maps keyed
// by the business key string, no hashing, no Bloom filter, no disk. It
// states the contract of doc.go directly: per key, the first occurrence
// (or, in version mode, a greater version) within the live generations is
// emitted, in input order.
type refModel struct {
	mode      Mode
	timeBase  TimeBase
	skewMs    int64
	spanMs    int64
	live      uint64
	nowMs     int64
	cur       uint64
	committed map[string]pending
	cycle     map[string]pending
	lastGen   uint64 // generation of the last commit: what a restart resumes from
}

func newRefModel(cfg Config) *refModel {
	return &refModel{
		mode: cfg.Mode, timeBase: cfg.TimeBase, skewMs: cfg.MaxFutureSkew.Milliseconds(),
		spanMs: cfg.Window.Milliseconds() / int64(cfg.Generations), live: uint64(cfg.Generations) + 1,
		committed: map[string]pending{}, cycle: map[string]pending{},
	}
}

func (m *refModel) oldest() uint64 {
	if m.cur+1 < m.live {
		return 0
	}
	return m.cur + 1 - m.live
}

type modelRecord struct {
	key     string // "" = no id field
	version uint64
	bad     bool // payload is not JSON
	tsMs    int64
}

// at moves the model's clock forward to now and its generation with it.
func (m *refModel) at(now int64) {
	m.nowMs = max(m.nowMs, now)
	if g := uint64(max(m.nowMs, 0) / m.spanMs); g > m.cur {
		m.cur = g
	}
}

// process decides a batch. On processing time the clock is the wall clock
// of the batch; on record time each record is decided at its own time (a
// future one clamped to the wall clock), the clock never going back.
func (m *refModel) process(recs []modelRecord, wallMs int64) []Decision {
	if m.timeBase == ProcessingTime {
		m.at(wallMs)
	}
	var out []Decision
	for _, r := range recs {
		if m.timeBase == RecordTime {
			ts := r.tsMs
			if ts > wallMs+m.skewMs {
				ts = wallMs
			}
			m.at(ts)
		}
		switch {
		case r.bad:
			out = append(out, Decision{Verdict: DeadLetter, Reason: partition.NotJSON.String()})
			continue
		case r.key == "":
			out = append(out, Decision{Verdict: DeadLetter, Reason: partition.FieldMissing.String()})
			continue
		}
		if p, ok := m.cycle[r.key]; ok && p.gen >= m.oldest() {
			if m.mode == ModeFirst || r.version <= p.version {
				out = append(out, Decision{Verdict: DropBatch})
				continue
			}
		} else if p, ok := m.committed[r.key]; ok && p.gen >= m.oldest() {
			if m.mode == ModeFirst || r.version <= p.version {
				out = append(out, Decision{Verdict: DropHistory})
				continue
			}
		}
		m.cycle[r.key] = pending{gen: m.cur, version: r.version}
		out = append(out, Decision{Verdict: Emit})
	}
	return out
}

func (m *refModel) commit() {
	for k, p := range m.cycle {
		m.committed[k] = p
	}
	for k, p := range m.committed {
		if p.gen < m.oldest() {
			delete(m.committed, k)
		}
	}
	clear(m.cycle)
	m.lastGen = m.cur
}

func (m *refModel) abort() { clear(m.cycle) }

// restart mirrors Open: the clock resumes at the start of the last
// committed generation.
func (m *refModel) restart() {
	m.abort()
	m.cur = m.lastGen
	m.nowMs = int64(m.cur) * m.spanMs
}

func encodeModelRecord(r modelRecord) Record {
	var value []byte
	switch {
	case r.bad:
		value = []byte(`{"id": oops`)
	case r.key == "":
		value = fmt.Appendf(nil, `{"v":%d,"pad":"x"}`, r.version)
	default:
		value = fmt.Appendf(nil, `{"meta":{"src":"m"},"id":%q,"v":%d}`, r.key, r.version)
	}
	return Record{Record: partition.Record{Value: value}, TimestampMs: r.tsMs}
}

// TestStageMatchesModel drives a real stage (Pebble on disk, real Bloom
// front) and the reference model with the same random stream: immediate
// repeats, far repeats, repeats across generations and past the window,
// random batch boundaries, aborted cycles and restarts (clean, crashed,
// stale snapshot). Every decision must agree.
func TestStageMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cfg := Config{
			Window:      time.Duration(rapid.IntRange(1, 8).Draw(rt, "window_s")) * time.Second,
			Generations: rapid.IntRange(1, 5).Draw(rt, "generations"),
			Mode:        rapid.SampledFrom([]Mode{ModeFirst, ModeVersion}).Draw(rt, "mode"),
			TimeBase:    rapid.SampledFrom([]TimeBase{RecordTime, ProcessingTime}).Draw(rt, "time_base"),
			Key:         []partition.Field{{Source: partition.SourceJSON, Name: "id"}},
			Version:     partition.Field{Source: partition.SourceJSON, Name: "v"},
			// A tiny, crowded Bloom front: false positives happen often, and
			// each must be confirmed by the store, never dropped.
			ExpectedKeys:      8,
			FalsePositiveRate: 0.3,
			MaxFutureSkew:     time.Second,
		}
		cfg.ApplyDefaults()
		model := newRefModel(cfg)
		spanMs := model.spanMs

		dir, err := os.MkdirTemp("", "stage-model-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)

		wallMs := int64(1_700_000_000_000)
		clock := func() time.Time { return time.UnixMilli(wallMs) }
		open := func() *Stage {
			s, err := Open(dir, cfg, Options{Clock: clock})
			if err != nil {
				rt.Fatalf("open: %v", err)
			}
			return s
		}
		st := open()
		defer func() { st.Close() }()
		var snapshot []byte // an old snapshot, to plant as stale

		keys := rapid.IntRange(1, 40).Draw(rt, "keys")
		tsMs := wallMs - 3*spanMs
		steps := rapid.IntRange(1, 60).Draw(rt, "steps")
		for step := range steps {
			switch op := rapid.IntRange(0, 11).Draw(rt, "op"); {
			case op <= 5: // a fetched batch
				wallMs += rapid.Int64Range(0, spanMs).Draw(rt, "wall_advance")
				tsMs += rapid.Int64Range(0, 2*spanMs).Draw(rt, "ts_advance")
				n := rapid.IntRange(0, 25).Draw(rt, "batch_len")
				recs := make([]modelRecord, n)
				in := make([]Record, n)
				for i := range recs {
					r := modelRecord{
						key:     fmt.Sprintf("order-%d", rapid.IntRange(0, keys-1).Draw(rt, "key")),
						version: rapid.Uint64Range(0, 6).Draw(rt, "version"),
						tsMs:    tsMs - rapid.Int64Range(0, 3*spanMs).Draw(rt, "ts_lag"),
					}
					switch rapid.IntRange(0, 40).Draw(rt, "kind") {
					case 0:
						r.bad = true
					case 1:
						r.key = ""
					case 2: // a producer clock far in the future
						r.tsMs = wallMs + rapid.Int64Range(2, 100).Draw(rt, "future_s")*1000
					}
					recs[i] = r
					in[i] = encodeModelRecord(r)
				}
				want := model.process(recs, wallMs)
				got, _, err := st.Process(in, nil)
				if err != nil {
					rt.Fatalf("step %d: process: %v", step, err)
				}
				for i := range want {
					if got[i] != want[i] {
						rt.Fatalf("step %d record %d (%+v): stage %v %q, model %v %q",
							step, i, recs[i], got[i].Verdict, got[i].Reason, want[i].Verdict, want[i].Reason)
					}
				}
			case op <= 8:
				if err := st.Commit(fmt.Appendf(nil, "step-%d", step)); err != nil {
					rt.Fatalf("step %d: commit: %v", step, err)
				}
				model.commit()
				if string(st.State().Checkpoint) != fmt.Sprintf("step-%d", step) {
					rt.Fatalf("step %d: checkpoint %q", step, st.State().Checkpoint)
				}
			case op == 9:
				st.Abort()
				model.abort()
			default: // restart: clean, crashed (no snapshot) or with a stale snapshot
				kind := rapid.SampledFrom([]string{"clean", "crash", "stale"}).Draw(rt, "restart")
				recorded := st.cur == st.State().Generation
				if err := st.Close(); err != nil {
					rt.Fatalf("step %d: close: %v", step, err)
				}
				path := filepath.Join(dir, SnapshotFile)
				// Close leaves no snapshot when the clock moved into a
				// generation no commit recorded (see writeSnapshot).
				cur, err := os.ReadFile(path)
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					rt.Fatalf("step %d: read snapshot: %v", step, err)
				}
				if err != nil && recorded {
					rt.Fatalf("step %d: clean close in a recorded generation left no snapshot", step)
				}
				switch kind {
				case "crash":
					os.Remove(path)
				case "stale":
					if snapshot != nil {
						os.WriteFile(path, snapshot, 0o644)
					}
				}
				snapshot = cur
				st = open()
				model.restart()
			}
		}
	})
}
