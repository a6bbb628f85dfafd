package filter

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// memCfg has generations of about 3.3 MB: mapped with huge pages.
var memCfg = Config{KeysPerGeneration: 2_000_000, FalsePositiveRate: 0.01, Generations: 4}

// vmaOf returns the /proc/self/smaps entry of the mapping holding addr.
func vmaOf(t *testing.T, addr uintptr) map[string]string {
	t.Helper()
	file, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no smaps: %v", err)
	}
	defer file.Close()
	var cur map[string]string
	found := false
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			if found {
				return cur
			}
			cur = map[string]string{}
			found = lo <= addr && addr < hi
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok && cur != nil {
			cur[k] = strings.TrimSpace(v)
		}
	}
	if found {
		return cur
	}
	t.Fatalf("no mapping holds %#x", addr)
	return nil
}

// TestBitsetsOnHugePages proves a large filter's rows (the first
// sub-filters of every generation) are mapped at a huge-page boundary in a
// mapping the kernel may back with huge pages (THPeligible), and that they
// are not in the Go heap's mappings.
func TestBitsetsOnHugePages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("huge pages are mapped on Linux only")
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || bytes.Contains(b, []byte("[never]")) {
		t.Skipf("transparent huge pages are off: %q %v", b, err)
	}
	f := mustNew(t, memCfg, 0)
	w := f.rows
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(w)))
	if addr%hugePageSize != 0 {
		t.Errorf("rows at %#x, not at a huge-page boundary", addr)
	}
	if vma := vmaOf(t, addr); vma["THPeligible"] != "1" {
		t.Errorf("mapping of the rows at %#x: THPeligible %q, want 1 (MADV_HUGEPAGE)", addr, vma["THPeligible"])
	}
	if n := uint64(len(w)) * 64; n != uint64(memCfg.Generations)*f.m {
		t.Errorf("rows of %d bits for %d generations of %d", n, memCfg.Generations, f.m)
	}
	if got, want := f.mem.mapped(), len(w)*8+2*hugePageSize; got < len(w)*8 || got > want {
		t.Errorf("mapped %d bytes for rows of %d", got, len(w)*8)
	}
	// Write every page: the kernel backs the mapping with huge pages
	// where it has them free (not asserted: memory may be fragmented).
	for j := 0; j < len(w); j += 512 {
		w[j] = 1
	}
	t.Logf("after touching %d MB of rows: %s", len(w)*8>>20, anonHugePages(t))
	runtime.KeepAlive(f)
}

func anonHugePages(t *testing.T) string {
	data, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return err.Error()
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "AnonHugePages:") {
			return strings.Join(strings.Fields(line), " ")
		}
	}
	return "no AnonHugePages"
}

// TestMappedBitsetsReleased proves the mapped bitsets are unmapped when a
// grown sub-filter leaves the window and when the Filter is dropped, and
// that small bitsets stay in the Go heap.
func TestMappedBitsetsReleased(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bitsets are mapped on Linux only")
	}
	if n := mustNew(t, Config{KeysPerGeneration: 10_000, FalsePositiveRate: 0.01, Generations: 4}, 0).mem.mapped(); n != 0 {
		t.Errorf("a 16 KB bitset was mapped (%d bytes)", n)
	}
	f := mustNew(t, memCfg, 0)
	base := f.mem.mapped()
	for i := range uint64(memCfg.KeysPerGeneration * 6 / 5) {
		f.Add(key(nsOther, i))
	}
	if len(f.slots[f.head].subs) < 2 {
		t.Fatal("generation 0 did not grow")
	}
	if f.mem.mapped() <= base {
		t.Fatalf("grown sub-filters not mapped: %d bytes, %d before", f.mem.mapped(), base)
	}
	if !f.Test(key(nsOther, 7)) {
		t.Fatal("a key of a grown generation tests negative")
	}
	f.Advance(uint64(memCfg.Generations)) // generation 0 leaves the window
	if got := f.mem.mapped(); got != base {
		t.Errorf("after the grown generation left: %d bytes mapped, want %d", got, base)
	}
	mem := f.mem
	f = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if mem.mapped() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dropped filter still maps %d bytes", mem.mapped())
		}
	}
}

// TestSnapshotOfMappedBitsets: a filter whose bitsets are mapped, with a
// grown generation, saves and loads to the same bits, and the loaded
// filter reads them into mapped bitsets of its own (bitset.ReadFrom
// reuses the words it is given).
func TestSnapshotOfMappedBitsets(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bitsets are mapped on Linux only")
	}
	f := mustNew(t, memCfg, 0)
	for i := range uint64(memCfg.KeysPerGeneration * 6 / 5) { // grows generation 0
		f.Add(key(nsOther, i))
	}
	f.Advance(1)
	for i := range uint64(1000) {
		f.Add(key(nsPresent, i))
	}
	path := t.TempDir() + "/f.bloom"
	if err := SaveFile(path, f); err != nil {
		t.Fatal(err)
	}
	g, err := LoadFile(path, memCfg)
	if err != nil {
		t.Fatal(err)
	}
	if g.mem.mapped() != f.mem.mapped() {
		t.Errorf("loaded filter maps %d bytes, the saved one %d", g.mem.mapped(), f.mem.mapped())
	}
	for age := range g.nlive {
		gs, fs := &g.slots[g.slotOf(age)], &f.slots[f.slotOf(age)]
		if len(gs.subs) != len(fs.subs) {
			t.Fatalf("age %d: %d sub-filters loaded, %d saved", age, len(gs.subs), len(fs.subs))
		}
		for j := range gs.subs {
			sb := &gs.subs[j]
			if !g.mem.owns(sb.words) || (sb.bf != nil && !slicesEqualWords(sb.words, sb.bf.BitSet().Words())) {
				t.Errorf("age %d sub-filter %d: bitset not in the filter's mappings", age, j)
			}
			if !slices.Equal(blocksOf(sb), blocksOf(&fs.subs[j])) {
				t.Errorf("age %d sub-filter %d: bits differ after load", age, j)
			}
		}
	}
	for i := range uint64(1000) {
		if !g.Test(key(nsPresent, i)) || !g.Test(key(nsOther, i)) {
			t.Fatalf("key %d lost in the snapshot", i)
		}
	}
}

// blocksOf returns the words of s's blocks in block order.
func blocksOf(s *sub) []uint64 {
	var out []uint64
	for off := s.lane; off < s.nblocks*s.stride; off += s.stride {
		out = append(out, s.words[off:off+s.bw]...)
	}
	return out
}

// slicesEqualWords reports whether a and b are the same words in the same
// memory.
func slicesEqualWords(a, b []uint64) bool {
	if len(a) != len(b) || len(a) == 0 {
		return len(a) == len(b)
	}
	if unsafe.SliceData(a) == unsafe.SliceData(b) {
		return true
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBitsetTailOnOrdinaryPages proves that only a bitset's whole huge
// pages are advised: the bytes past its last huge-page boundary lie in a
// mapping the kernel backs with ordinary pages (not THPeligible), so once
// written they are resident as far as the bitset reaches, not as a whole
// 2 MiB page.
func TestBitsetTailOnOrdinaryPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("huge pages are mapped on Linux only")
	}
	if b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil || bytes.Contains(b, []byte("[never]")) {
		t.Skipf("transparent huge pages are off: %q %v", b, err)
	}
	f := mustNew(t, memCfg, 0)
	w := f.rows
	n := len(w) * 8
	h := hugeSpan(n)
	if h == 0 || h == n {
		t.Fatalf("bitset of %d bytes: want one with whole huge pages and a tail (span %d)", n, h)
	}
	for j := 0; j < len(w); j += 512 {
		w[j] = 1
	}
	w[len(w)-1] = 1
	base := uintptr(unsafe.Pointer(unsafe.SliceData(w)))
	if vma := vmaOf(t, base); vma["THPeligible"] != "1" {
		t.Errorf("whole huge pages of the bitset: THPeligible %q, want 1", vma["THPeligible"])
	}
	tail := vmaOf(t, base+uintptr(h))
	if tail["THPeligible"] != "0" {
		t.Errorf("tail of %d bytes past the last huge page: THPeligible %q, want 0", n-h, tail["THPeligible"])
	}
	var rss, huge int
	fmt.Sscanf(tail["Rss"], "%d kB", &rss)
	fmt.Sscanf(tail["AnonHugePages"], "%d kB", &huge)
	if limit := (n - h + 4095) / 4096 * 4; rss > limit || huge != 0 {
		t.Errorf("tail of %d bytes written: Rss %d kB (at most %d), AnonHugePages %d kB (want 0)", n-h, rss, limit, huge)
	}
	runtime.KeepAlive(f)
}
