package filter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strconv"
	"testing"

	"github.com/bits-and-blooms/bitset"
)

// snapCfg is small so that every byte of a snapshot can be flipped.
var snapCfg = Config{KeysPerGeneration: 40, FalsePositiveRate: 0.05, Generations: 3}

// snapFilter returns a filter with keys in each of its generations and the
// probe set whose answers a restored filter must reproduce.
func snapFilter(t *testing.T, cfg Config) *Filter {
	t.Helper()
	f := mustNew(t, cfg, 20)
	for g := uint64(18); g <= 20; g++ {
		for i := range uint64(cfg.KeysPerGeneration) {
			f.AddTo(g, key(nsPresent, g<<32|i))
		}
	}
	f.SetTag(0xfeedface)
	f.SetMark(0x5eed)
	return f
}

func snapshotBytes(t *testing.T, f *Filter) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := f.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) || n != f.snapshotSize() {
		t.Fatalf("WriteTo returned %d, wrote %d, snapshotSize %d", n, buf.Len(), f.snapshotSize())
	}
	return buf.Bytes()
}

// requireSameAnswers compares Candidates of both filters over keys added and
// absent, and their state.
func requireSameAnswers(t *testing.T, want, got *Filter) {
	t.Helper()
	if got.Current() != want.Current() || got.Tag() != want.Tag() || got.Mark() != want.Mark() || got.Config() != want.Config() {
		t.Fatalf("restored current %d tag %d mark %d config %+v, want %d %d %d %+v",
			got.Current(), got.Tag(), got.Mark(), got.Config(), want.Current(), want.Tag(), want.Mark(), want.Config())
	}
	if !slices.Equal(got.Stats(), want.Stats()) {
		t.Fatalf("restored Stats %+v, want %+v", got.Stats(), want.Stats())
	}
	var a, b []uint64
	for g := want.Oldest(); g <= want.Current(); g++ {
		for i := range uint64(2 * want.cfg.KeysPerGeneration) { // half of them absent
			for _, h := range [2]uint64{g<<32 | i, i} {
				a = want.Candidates(key(nsPresent, h), a[:0])
				b = got.Candidates(key(nsPresent, h), b[:0])
				if !slices.Equal(a, b) {
					t.Fatalf("key %x: restored Candidates %v, want %v", h, b, a)
				}
			}
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		start uint64
	}{
		{"full window", 20},
		{"partial window", 1}, // generations 0 and 1 live, the third slot never used
		{"generation zero", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := mustNew(t, snapCfg, tt.start)
			for i := range uint64(30) {
				f.Add(key(nsPresent, i))
				f.AddTo(f.Oldest(), key(nsPresent, 1<<40|i))
			}
			f.SetTag(77)
			data := snapshotBytes(t, f)
			g, err := ReadFrom(bytes.NewReader(data), snapCfg)
			if err != nil {
				t.Fatalf("ReadFrom: %v", err)
			}
			requireSameAnswers(t, f, g)
			// The restored filter keeps working: advance and add.
			f.Advance(tt.start + 1)
			g.Advance(tt.start + 1)
			f.Add(key(nsOther, 1))
			g.Add(key(nsOther, 1))
			requireSameAnswers(t, f, g)
			if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) {
				t.Fatal("snapshots of the original and the restored filter differ")
			}
		})
	}
	t.Run("full", func(t *testing.T) {
		f := snapFilter(t, snapCfg)
		g, err := ReadFrom(bytes.NewReader(snapshotBytes(t, f)), snapCfg)
		if err != nil {
			t.Fatal(err)
		}
		requireSameAnswers(t, f, g)
	})
}

// TestSnapshotReadsExactly checks that ReadFrom consumes exactly one snapshot,
// so snapshots can be embedded in a stream.
func TestSnapshotReadsExactly(t *testing.T) {
	f := snapFilter(t, snapCfg)
	data := append(snapshotBytes(t, f), "next"...)
	r := bytes.NewReader(data)
	if _, err := ReadFrom(r, snapCfg); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "next" {
		t.Fatalf("left %q after the snapshot, want %q", rest, "next")
	}
}

// TestSnapshotCorruption flips every bit of a snapshot, one at a time, and
// truncates it at every length: each must fail with a *CorruptError or, for
// the format version, a *MismatchError, never restore a filter.
func TestSnapshotCorruption(t *testing.T) {
	f := snapFilter(t, snapCfg)
	data := snapshotBytes(t, f)
	t.Logf("snapshot of %d bytes", len(data))
	bad := make([]byte, len(data))
	for i := range data {
		for bit := range 8 {
			copy(bad, data)
			bad[i] ^= 1 << bit
			_, err := ReadFrom(bytes.NewReader(bad), snapCfg)
			var corrupt *CorruptError
			var mismatch *MismatchError
			switch {
			case errors.As(err, &corrupt):
			case errors.As(err, &mismatch) && i >= 8 && i < 10 && mismatch.Field == "format version":
			default:
				t.Fatalf("byte %d bit %d flipped: ReadFrom error %v, want *CorruptError", i, bit, err)
			}
		}
	}
	for n := range len(data) {
		_, err := ReadFrom(bytes.NewReader(data[:n]), snapCfg)
		var corrupt *CorruptError
		if !errors.As(err, &corrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("truncated to %d bytes: ReadFrom error %v, want *CorruptError wrapping io.ErrUnexpectedEOF", n, err)
		}
		if corrupt.Offset != int64(n) {
			t.Fatalf("truncated to %d bytes: error at offset %d", n, corrupt.Offset)
		}
	}
}

// TestSnapshotCorruptSizes rewrites a generation's size fields with a valid
// checksum: ReadFrom must reject them before allocating.
func TestSnapshotCorruptSizes(t *testing.T) {
	f := snapFilter(t, snapCfg)
	data := snapshotBytes(t, f)
	lenOff := headerLen + 4 + genHeaderLen + 16 // first generation's bitset length
	binary.BigEndian.PutUint64(data[lenOff:], 1<<62)
	_, err := ReadFrom(bytes.NewReader(data), snapCfg)
	var corrupt *CorruptError
	if !errors.As(err, &corrupt) {
		t.Fatalf("ReadFrom with a huge bitset length: %v, want *CorruptError", err)
	}
}

func TestSnapshotConfigMismatch(t *testing.T) {
	data := snapshotBytes(t, snapFilter(t, snapCfg))
	tests := []struct {
		field string
		cfg   Config
	}{
		{"filter.generations", Config{KeysPerGeneration: 40, FalsePositiveRate: 0.05, Generations: 4}},
		{"filter.keys_per_generation", Config{KeysPerGeneration: 41, FalsePositiveRate: 0.05, Generations: 3}},
		{"filter.false_positive_rate", Config{KeysPerGeneration: 40, FalsePositiveRate: 0.050000001, Generations: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			_, err := ReadFrom(bytes.NewReader(data), tt.cfg)
			var mismatch *MismatchError
			if !errors.As(err, &mismatch) || mismatch.Field != tt.field {
				t.Fatalf("ReadFrom = %v, want *MismatchError for %s", err, tt.field)
			}
			t.Log(err)
		})
	}
	t.Run("invalid config", func(t *testing.T) {
		if _, err := ReadFrom(bytes.NewReader(data), Config{}); err == nil {
			t.Fatal("ReadFrom accepted an invalid config")
		}
	})
	t.Run("format version", func(t *testing.T) {
		// Versions 1 (one bitset per generation, before generations grew)
		// and 2 (no mark) are refused like any other: the stage rebuilds
		// from the store.
		for _, v := range []uint16{1, 2, snapshotVersion + 1} {
			other := slices.Clone(data)
			binary.BigEndian.PutUint16(other[8:], v)
			_, err := ReadFrom(bytes.NewReader(other), snapCfg)
			var mismatch *MismatchError
			if !errors.As(err, &mismatch) || mismatch.Field != "format version" || mismatch.Snapshot != strconv.Itoa(int(v)) {
				t.Fatalf("ReadFrom of version %d = %v, want *MismatchError for the format version", v, err)
			}
			if _, cerr := ReadConfig(bytes.NewReader(other)); !errors.As(cerr, &mismatch) || cerr.Error() != err.Error() {
				t.Fatalf("ReadConfig of version %d = %v, want the error of ReadFrom, %v", v, cerr, err)
			}
			t.Log(err)
		}
	})
	t.Run("bitset byte order", func(t *testing.T) {
		// bitset's word order is process-global; a snapshot written under the
		// other order must not be misread.
		bitset.LittleEndian()
		defer bitset.BigEndian()
		_, err := ReadFrom(bytes.NewReader(data), snapCfg)
		var mismatch *MismatchError
		if !errors.As(err, &mismatch) || mismatch.Field != "bitset byte order" {
			t.Fatalf("ReadFrom = %v, want *MismatchError for the byte order", err)
		}
	})
}

func TestSnapshotReadError(t *testing.T) {
	data := snapshotBytes(t, snapFilter(t, snapCfg))
	boom := errors.New("disk on fire")
	r := io.MultiReader(bytes.NewReader(data[:200]), &errReader{boom})
	_, err := ReadFrom(r, snapCfg)
	var corrupt *CorruptError
	if !errors.Is(err, boom) || errors.As(err, &corrupt) {
		t.Fatalf("ReadFrom = %v, want the reader's error, not corruption", err)
	}
}

func TestSnapshotWriteError(t *testing.T) {
	f := snapFilter(t, snapCfg)
	size := f.snapshotSize()
	for _, limit := range []int64{0, 10, headerLen + 4, headerLen + 30, size - 2} {
		w := &limitWriter{n: limit}
		n, err := f.WriteTo(w)
		if !errors.Is(err, errLimit) || n > limit {
			t.Fatalf("writer failing after %d bytes: WriteTo = %d, %v", limit, n, err)
		}
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

var errLimit = errors.New("write limit reached")

// limitWriter accepts n bytes, then fails.
type limitWriter struct{ n int64 }

func (w *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.n {
		k := int(w.n)
		w.n = 0
		return k, errLimit
	}
	w.n -= int64(len(p))
	return len(p), nil
}

// FuzzReadFrom feeds arbitrary bytes to the decoder: it must never panic or
// allocate beyond the configured size, and whatever it accepts must
// re-encode to the same bytes.
func FuzzReadFrom(f *testing.F) {
	cfg := Config{KeysPerGeneration: 8, FalsePositiveRate: 0.1, Generations: 2}
	flt, err := New(cfg, 5)
	if err != nil {
		f.Fatal(err)
	}
	flt.Add(key(nsPresent, 1))
	var buf bytes.Buffer
	if _, err := flt.WriteTo(&buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(snapshotMagic))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ReadFrom(bytes.NewReader(data), cfg)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if _, err := g.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data[:out.Len()]) {
			t.Fatal("accepted snapshot does not re-encode to its bytes")
		}
	})
}
