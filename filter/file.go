package filter

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

const fileBufferSize = 1 << 20

// SaveFile writes a snapshot of f to path atomically: it writes a temporary
// file in the same directory, fsyncs it, renames it over path and fsyncs the
// directory. After a crash path holds either the previous snapshot or the new
// one, never a mix; a leftover temporary file is named path + ".tmp-*".
func SaveFile(path string, f *Filter) error {
	return saveFile(path, f, nil)
}

// saveFile is SaveFile with a hook that wraps the file writer, for tests.
func saveFile(path string, f *Filter, wrap func(io.Writer) io.Writer) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, base+".tmp-*")
	if err != nil {
		return fmt.Errorf("filter: save %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	var w io.Writer = tmp
	if wrap != nil {
		w = wrap(w)
	}
	bw := bufio.NewWriterSize(w, fileBufferSize)
	if _, err := f.WriteTo(bw); err != nil {
		return fmt.Errorf("filter: save %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("filter: save %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("filter: save %s: fsync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("filter: save %s: close: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("filter: save %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		// The snapshot is in place but its rename may not survive a crash;
		// the previous snapshot or none is what a restart would then find.
		return fmt.Errorf("filter: save %s: fsync dir: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// LoadFile reads a snapshot saved by SaveFile for an identical cfg. Besides
// the errors of ReadFrom, a missing file gives an error matching
// fs.ErrNotExist, and bytes after the snapshot a *CorruptError.
func LoadFile(path string, cfg Config) (*Filter, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("filter: load: %w", err)
	}
	defer file.Close()
	br := bufio.NewReaderSize(file, fileBufferSize)
	f, err := ReadFrom(br, cfg)
	if err == nil {
		if _, perr := br.Peek(1); perr == nil {
			err = &CorruptError{Offset: f.snapshotSize(), Reason: "trailing bytes after the snapshot"}
		} else if !errors.Is(perr, io.EOF) {
			err = perr
		}
	}
	var corrupt *CorruptError
	var mismatch *MismatchError
	switch {
	case err == nil:
		return f, nil
	case errors.As(err, &corrupt):
		corrupt.Path = path
		return nil, corrupt
	case errors.As(err, &mismatch):
		mismatch.Path = path
		return nil, mismatch
	default:
		return nil, fmt.Errorf("filter: load %s: %w", path, err)
	}
}
