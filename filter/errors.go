package filter

import "fmt"

// CorruptError reports a snapshot that is damaged, truncated or not a filter
// snapshot at all. The caller rebuilds the filter from the exact store.
type CorruptError struct {
	// Path is the snapshot file, set by LoadFile.
	Path string
	// Offset is the number of snapshot bytes read when the damage was found.
	Offset int64
	// Reason says what is wrong, e.g. "checksum mismatch".
	Reason string
	// Err is the underlying cause, such as io.ErrUnexpectedEOF; may be nil.
	Err error
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("filter: corrupt snapshot%s at byte %d: %s", pathSuffix(e.Path), e.Offset, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *CorruptError) Unwrap() error { return e.Err }

// MismatchError reports an intact snapshot written by another format version
// or for another configuration. Its bits cannot be reused: the caller
// rebuilds the filter from the exact store.
type MismatchError struct {
	// Path is the snapshot file, set by LoadFile.
	Path string
	// Field is the config field path ("filter.generations") or the snapshot
	// property ("format version", "bloom parameters m", "bitset byte order")
	// that differs.
	Field string
	// Snapshot and Want are the snapshot's value and the expected one.
	Snapshot, Want string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("filter: snapshot%s %s is %s, want %s", pathSuffix(e.Path), e.Field, e.Snapshot, e.Want)
}

func pathSuffix(path string) string {
	if path == "" {
		return ""
	}
	return " " + path
}
