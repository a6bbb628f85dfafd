package harness

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
)

// memProbe measures the process's resident memory over one case: the
// baseline at the start and the peak since then (VmHWM after resetting it
// through /proc/self/clear_refs). On systems without /proc both read 0.
type memProbe struct{ base uint64 }

func startMemProbe() memProbe {
	runtime.GC()
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM to the current RSS
	return memProbe{base: procStatus("VmRSS:")}
}

// peak returns the baseline and the peak RSS in bytes.
func (m memProbe) peak() (base, peak uint64) {
	return m.base, max(procStatus("VmHWM:"), m.base)
}

// procStatus reads one kB field of /proc/self/status in bytes.
func procStatus(field string) uint64 { return procField("/proc/self/status", field) }

// procField reads one kB field of a /proc file of "Name: N kB" lines in
// bytes (0 if absent).
func procField(path, field string) uint64 { return procNumber(path, field) << 10 }

// writtenBytes is what the process has passed to write system calls so far
// (wchar of /proc/self/io: page-cache writes included; 0 without /proc).
func writtenBytes() uint64 { return procNumber("/proc/self/io", "wchar:") }

// procNumber reads the first number after field in a /proc file of
// "Name: N [unit]" lines (0 if absent).
func procNumber(path, field string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte(field)); ok {
			f := bytes.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(string(f[0]), 10, 64)
				return n
			}
		}
	}
	return 0
}

// dirBytes is the apparent size of every regular file under dir.
func dirBytes(dir string) uint64 {
	var n uint64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += uint64(fi.Size())
			}
		}
		return nil
	})
	return n
}
