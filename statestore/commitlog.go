package statestore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/partition"
)

// The commit log holds the Commits and Expires not yet in a run, so that a
// process crash loses none of them (see "Crash semantics" in doc.go). Each
// memIndex has its own log file, dir/commits-NNNNNN.log; the file is removed
// once the run holding its keys is in Pebble together with the state.
//
// A record is: payload length (4 bytes LE), CRC-32C of the payload (4 bytes
// LE), payload. Payload of a commit: 'c', uvarint Seq, uvarint Generation,
// uvarint checkpoint length, checkpoint, uvarint key count, then per key
// uvarint gen, 16-byte hash, uvarint version. Payload of an expiry: 'e',
// uvarint floor. Replay stops at the first record that is short, fails its
// checksum or does not follow the previous commit: what follows is a torn
// tail of a crash.

const (
	logPrefix = "commits-"
	logSuffix = ".log"

	recCommit byte = 'c'
	recExpire byte = 'e'
	recHdrLen      = 8
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func logName(n uint64) string { return fmt.Sprintf("%s%06d%s", logPrefix, n, logSuffix) }

// parseLogName returns the number of a commit log file name.
func parseLogName(name string) (uint64, bool) {
	if !strings.HasPrefix(name, logPrefix) || !strings.HasSuffix(name, logSuffix) {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, logPrefix), logSuffix), 10, 64)
	return n, err == nil
}

// commitLog is the open log file of the active memIndex.
type commitLog struct {
	fs        vfs.FS
	dir       string
	num       uint64
	f         vfs.File
	dirSynced bool // the file's directory entry is durable
	buf       []byte
}

func createLog(fs vfs.FS, dir string, num uint64) (*commitLog, error) {
	f, err := fs.Create(fs.PathJoin(dir, logName(num)), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("create commit log: %w", err)
	}
	return &commitLog{fs: fs, dir: dir, num: num, f: f}, nil
}

// appendCommit writes one commit record (not synced).
func (l *commitLog) appendCommit(st State, es []entry) error {
	b := append(l.buf[:0], make([]byte, recHdrLen)...)
	b = append(b, recCommit)
	b = binary.AppendUvarint(b, st.Seq)
	b = binary.AppendUvarint(b, st.Generation)
	b = binary.AppendUvarint(b, uint64(len(st.Checkpoint)))
	b = append(b, st.Checkpoint...)
	b = binary.AppendUvarint(b, uint64(len(es)))
	b = slices.Grow(b, len(es)*(2+16+2))
	var hb [16]byte
	for i := range es {
		b = binary.AppendUvarint(b, es[i].gen)
		es[i].h.Put(hb[:])
		b = append(b, hb[:]...)
		b = binary.AppendUvarint(b, es[i].version)
	}
	l.buf = b
	return l.write(b)
}

// appendExpire writes one expiry record (not synced).
func (l *commitLog) appendExpire(floor uint64) error {
	b := append(l.buf[:0], make([]byte, recHdrLen)...)
	b = append(b, recExpire)
	b = binary.AppendUvarint(b, floor)
	l.buf = b
	return l.write(b)
}

func (l *commitLog) write(b []byte) error {
	p := b[recHdrLen:]
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(p)))
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(p, crcTable))
	if _, err := l.f.Write(b); err != nil {
		return fmt.Errorf("write commit log %s: %w", logName(l.num), err)
	}
	return nil
}

// sync makes the log durable, its directory entry included.
func (l *commitLog) sync() error {
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync commit log %s: %w", logName(l.num), err)
	}
	if !l.dirSynced {
		if err := syncDir(l.fs, l.dir); err != nil {
			return fmt.Errorf("sync %s: %w", l.dir, err)
		}
		l.dirSynced = true
	}
	return nil
}

func (l *commitLog) close() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("close commit log %s: %w", logName(l.num), err)
	}
	return nil
}

// listLogs returns the numbers of the commit logs in dir, ascending.
func listLogs(fs vfs.FS, dir string) ([]uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return nil, err
	}
	var nums []uint64
	for _, name := range names {
		if n, ok := parseLogName(name); ok {
			nums = append(nums, n)
		}
	}
	slices.Sort(nums)
	return nums, nil
}

// replay is what the commit logs add to the durable state.
type replay struct {
	mem   *memIndex
	state State  // the last commit replayed (Seq 0: none)
	floor uint64 // the highest floor of an expiry record (0: none)
	torn  bool   // a log ended in a torn or foreign record
}

// replayLogs reads the logs in order and applies every commit after seq,
// stopping at the first torn record or gap in the commit sequence.
func replayLogs(fs vfs.FS, dir string, nums []uint64, seq uint64) (*replay, error) {
	r := &replay{mem: newMemIndex(0, 0)}
	next := seq + 1
	var es []entry
	for _, n := range nums {
		f, err := fs.Open(fs.PathJoin(dir, logName(n)))
		if err != nil {
			return nil, fmt.Errorf("open commit log: %w", err)
		}
		data, err := io.ReadAll(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("read commit log %s: %w", logName(n), err)
		}
		for len(data) > 0 {
			if len(data) < recHdrLen {
				r.torn = true
				return r, nil
			}
			ln := int(binary.LittleEndian.Uint32(data))
			if ln == 0 || ln > len(data)-recHdrLen || crc32.Checksum(data[recHdrLen:recHdrLen+ln], crcTable) != binary.LittleEndian.Uint32(data[4:]) {
				r.torn = true
				return r, nil
			}
			p := data[recHdrLen : recHdrLen+ln]
			data = data[recHdrLen+ln:]
			switch {
			case len(p) > 0 && p[0] == recExpire:
				floor, k := binary.Uvarint(p[1:])
				if k <= 0 {
					return nil, corruptf("commit log %s: corrupt expiry record", logName(n))
				}
				r.floor = max(r.floor, floor)
			case len(p) > 0 && p[0] == recCommit:
				st, batch, err := decodeCommit(p[1:], es[:0])
				if err != nil {
					return nil, fmt.Errorf("commit log %s: %w", logName(n), err)
				}
				es = batch
				switch {
				case st.Seq < next:
					continue // already in a run
				case st.Seq > next:
					r.torn = true // a commit before it was lost
					return r, nil
				}
				r.mem.putAll(es)
				r.state = st
				next++
			default:
				r.torn = true // not a record this store wrote
				return r, nil
			}
		}
	}
	return r, nil
}

var errCorruptCommit error = &corruptError{errors.New("corrupt commit record")}

func decodeCommit(p []byte, es []entry) (State, []entry, error) {
	var st State
	var n int
	next := func() uint64 {
		if n < 0 {
			return 0
		}
		x, k := binary.Uvarint(p)
		if k <= 0 {
			n = -1
			return 0
		}
		p = p[k:]
		return x
	}
	st.Seq = next()
	st.Generation = next()
	cl := next()
	if n < 0 || cl > uint64(len(p)) {
		return st, es, errCorruptCommit
	}
	if cl > 0 {
		st.Checkpoint = append([]byte(nil), p[:cl]...)
	}
	p = p[cl:]
	keys := next()
	for range keys {
		gen := next()
		if n < 0 || len(p) < 16 {
			return st, es, errCorruptCommit
		}
		h := partition.HashFromBytes(p[:16])
		p = p[16:]
		v := next()
		es = append(es, entry{gen: gen, h: h, version: v})
	}
	if n < 0 || len(p) != 0 {
		return st, es, errCorruptCommit
	}
	return st, es, nil
}
