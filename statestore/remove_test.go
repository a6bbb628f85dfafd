package statestore

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveRefusesAnOpenStore: Remove deletes nothing while the store is
// open, deletes the whole root once it is closed, and takes a missing root
// as removed.
func TestRemoveRefusesAnOpenStore(t *testing.T) {
	root := filepath.Join(t.TempDir(), "partition-0")
	dir := filepath.Join(root, "store")
	s, err := Open(dir, Options{MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bloom.snap"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Remove(root, dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Remove of an open store: %v, want ErrLocked", err)
	}
	if _, err := os.Stat(filepath.Join(root, "bloom.snap")); err != nil {
		t.Fatalf("Remove of an open store removed files: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := Remove(root, dir); err != nil {
		t.Fatalf("Remove of a closed store: %v", err)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Remove left %s: %v", root, err)
	}
	if err := Remove(root, dir); err != nil {
		t.Fatalf("Remove of a missing directory: %v", err)
	}
	if s, err = Open(dir, Options{MemTableSize: 1 << 20}); err != nil {
		t.Fatalf("Open after Remove: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
