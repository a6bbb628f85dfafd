//go:build !linux

package statestore

import "github.com/cockroachdb/pebble/v2/vfs"

const fadvDontNeed = 4

// fadvise does nothing here: benchmarks' LAYOUT_COLD evicts nothing.
func fadvise(vfs.File, int) {}
