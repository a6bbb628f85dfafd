//go:build !linux

package statestore

import "github.com/cockroachdb/pebble/v2/vfs"

const (
	fadvRandom   = 1
	fadvDontNeed = 4
)

// fadvise does nothing where the kernel takes no advice the store gives.
func fadvise(vfs.File, int) {}
