package filter

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/partition"
)

func TestSaveLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stage-3.bloom")
	f := snapFilter(t, snapCfg)
	if err := SaveFile(path, f); err != nil {
		t.Fatal(err)
	}
	g, err := LoadFile(path, snapCfg)
	if err != nil {
		t.Fatal(err)
	}
	requireSameAnswers(t, f, g)

	// A second save replaces the first.
	f.Advance(21)
	f.Add(key(nsOther, 5))
	f.SetTag(9)
	if err := SaveFile(path, f); err != nil {
		t.Fatal(err)
	}
	g, err = LoadFile(path, snapCfg)
	if err != nil {
		t.Fatal(err)
	}
	requireSameAnswers(t, f, g)
	requireOnlyFile(t, dir, "stage-3.bloom")
}

// TestSaveFileFailureKeepsPrevious makes the write fail part way: the previous
// snapshot must survive untouched and no temporary file may remain.
func TestSaveFileFailureKeepsPrevious(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bloom")
	old := snapFilter(t, snapCfg)
	if err := SaveFile(path, old); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	next := snapFilter(t, snapCfg)
	next.Advance(30)
	for _, limit := range []int64{0, 100, next.snapshotSize() - 1} {
		err := saveFile(path, next, func(w io.Writer) io.Writer {
			return io.MultiWriter(w, &limitWriter{n: limit})
		})
		if !errors.Is(err, errLimit) {
			t.Fatalf("limit %d: saveFile = %v, want the write error", limit, err)
		}
		after, err := os.ReadFile(path)
		if err != nil || string(after) != string(before) {
			t.Fatalf("limit %d: previous snapshot changed (err %v)", limit, err)
		}
		requireOnlyFile(t, dir, "f.bloom")
	}
	g, err := LoadFile(path, snapCfg)
	if err != nil {
		t.Fatal(err)
	}
	requireSameAnswers(t, old, g)
}

func TestSaveFileMissingDir(t *testing.T) {
	err := SaveFile(filepath.Join(t.TempDir(), "nope", "f.bloom"), snapFilter(t, snapCfg))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("SaveFile into a missing directory = %v, want fs.ErrNotExist", err)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.bloom")
	if _, err := LoadFile(path, snapCfg); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadFile of a missing file = %v, want fs.ErrNotExist", err)
	}
	f := snapFilter(t, snapCfg)
	if err := SaveFile(path, f); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0x10
	write(flipped)
	var corrupt *CorruptError
	if _, err := LoadFile(path, snapCfg); !errors.As(err, &corrupt) || corrupt.Path != path {
		t.Fatalf("flipped byte: LoadFile = %v, want *CorruptError naming the file", err)
	} else {
		t.Log(err)
	}

	write(data[:len(data)-1])
	if _, err := LoadFile(path, snapCfg); !errors.As(err, &corrupt) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated: LoadFile = %v, want *CorruptError wrapping io.ErrUnexpectedEOF", err)
	} else {
		t.Log(err)
	}

	write(append(append([]byte(nil), data...), 0))
	if _, err := LoadFile(path, snapCfg); !errors.As(err, &corrupt) || corrupt.Offset != int64(len(data)) {
		t.Fatalf("trailing byte: LoadFile = %v, want *CorruptError at byte %d", err, len(data))
	} else {
		t.Log(err)
	}

	write(data)
	other := snapCfg
	other.Generations++
	var mismatch *MismatchError
	if _, err := LoadFile(path, other); !errors.As(err, &mismatch) || mismatch.Path != path || mismatch.Field != "filter.generations" {
		t.Fatalf("other config: LoadFile = %v, want *MismatchError naming the file and field", err)
	} else {
		t.Log(err)
	}
}

func requireOnlyFile(t *testing.T, dir, name string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != name {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %v, want only %s", names, name)
	}
}

// TestReadConfig: the header names the Config a snapshot was written for,
// and LoadFile with it restores the filter.
func TestReadConfig(t *testing.T) {
	cfg := Config{KeysPerGeneration: 1234, FalsePositiveRate: 0.003, Generations: 5}
	f, err := New(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	f.Add(partition.HashKey([]byte("a")))
	path := filepath.Join(t.TempDir(), "bloom.snapshot")
	if err := SaveFile(path, f); err != nil {
		t.Fatal(err)
	}
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	got, err := ReadConfig(file)
	if err != nil || got != cfg {
		t.Fatalf("ReadConfig = %+v, %v; want %+v", got, err, cfg)
	}
	g, err := LoadFile(path, got)
	if err != nil || g.Current() != 9 || !g.Test(partition.HashKey([]byte("a"))) {
		t.Fatalf("LoadFile with the read config: %v", err)
	}
	if _, err := ReadConfig(strings.NewReader(strings.Repeat("x", 100))); err == nil {
		t.Error("ReadConfig accepted garbage")
	}
}
