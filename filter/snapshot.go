package filter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"runtime"
	"strconv"

	"github.com/bits-and-blooms/bitset"
)

// Snapshot layout; see the package documentation.
const (
	snapshotMagic   = "DSBLOOM\x00"
	snapshotVersion = 4  // 1: one bitset per generation, before generations grew; 2: without the mark; 3: 512-bit blocks
	headerLen       = 72 // fields covered by the header checksum
	genHeaderLen    = 20 // gen, added, sub-filters
	bloomHeaderLen  = 24 // bloom m, k and bitset length, as bloom.WriteTo writes them

	flagLittleEndian = 1 << 0 // bitset words were written little-endian
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// WriteTo writes a snapshot of f to w and returns the bytes written. It
// writes in chunks of about 1 KiB; wrap a file or socket in a bufio.Writer.
// It implements io.WriterTo.
func (f *Filter) WriteTo(w io.Writer) (int64, error) {
	cw := &crcWriter{w: w}
	var hdr [headerLen + 4]byte
	copy(hdr[0:8], snapshotMagic)
	binary.BigEndian.PutUint16(hdr[8:], snapshotVersion)
	binary.BigEndian.PutUint16(hdr[10:], wordOrderFlag())
	binary.BigEndian.PutUint32(hdr[12:], uint32(f.cfg.Generations))
	binary.BigEndian.PutUint64(hdr[16:], uint64(f.cfg.KeysPerGeneration))
	binary.BigEndian.PutUint64(hdr[24:], math.Float64bits(f.cfg.FalsePositiveRate))
	binary.BigEndian.PutUint64(hdr[32:], f.m)
	binary.BigEndian.PutUint64(hdr[40:], f.k)
	binary.BigEndian.PutUint64(hdr[48:], f.tag)
	binary.BigEndian.PutUint64(hdr[56:], f.cur)
	binary.BigEndian.PutUint64(hdr[64:], f.mark)
	binary.BigEndian.PutUint32(hdr[headerLen:], crc32.Checksum(hdr[:headerLen], castagnoli))
	if _, err := cw.Write(hdr[:]); err != nil {
		return cw.n, fmt.Errorf("filter: write snapshot: %w", err)
	}
	idx := f.head
	for i := range f.nlive {
		s := &f.slots[idx]
		gen := f.cur - uint64(i)
		var gh [genHeaderLen]byte
		binary.BigEndian.PutUint64(gh[0:], gen)
		binary.BigEndian.PutUint64(gh[8:], s.added)
		binary.BigEndian.PutUint32(gh[16:], uint32(len(s.subs)))
		if _, err := cw.Write(gh[:]); err != nil {
			return cw.n, fmt.Errorf("filter: write snapshot: generation %d: %w", gen, err)
		}
		for j := range s.subs {
			if err := s.subs[j].writeTo(cw); err != nil {
				return cw.n, fmt.Errorf("filter: write snapshot: generation %d sub-filter %d: %w", gen, j, err)
			}
		}
		idx = f.prev(idx)
	}
	runtime.KeepAlive(f) // the bitsets may be unmapped once f is unreachable
	var trailer [4]byte
	binary.BigEndian.PutUint32(trailer[:], cw.crc)
	if _, err := cw.Write(trailer[:]); err != nil {
		return cw.n, fmt.Errorf("filter: write snapshot: %w", err)
	}
	return cw.n, nil
}

// header is the checked header of a snapshot.
type header struct {
	cfg            Config
	order          uint16 // flags: bitset byte order
	m, k, tag, cur uint64
	mark           uint64
}

// readHeader reads the header of a snapshot and checks its magic, format
// version and checksum.
func readHeader(cr *crcReader) (header, error) {
	var hdr [headerLen + 4]byte
	if err := cr.readFull(hdr[:]); err != nil {
		return header{}, err
	}
	if string(hdr[0:8]) != snapshotMagic {
		return header{}, &CorruptError{Offset: 0, Reason: "bad magic, not a filter snapshot"}
	}
	if v := binary.BigEndian.Uint16(hdr[8:]); v != snapshotVersion {
		return header{}, &MismatchError{Field: "format version", Snapshot: strconv.Itoa(int(v)), Want: strconv.Itoa(snapshotVersion)}
	}
	if got, want := binary.BigEndian.Uint32(hdr[headerLen:]), crc32.Checksum(hdr[:headerLen], castagnoli); got != want {
		return header{}, &CorruptError{Offset: headerLen, Reason: fmt.Sprintf("header checksum %08x, computed %08x", got, want)}
	}
	return header{
		cfg: Config{
			Generations:       int(binary.BigEndian.Uint32(hdr[12:])),
			KeysPerGeneration: uint(binary.BigEndian.Uint64(hdr[16:])),
			FalsePositiveRate: math.Float64frombits(binary.BigEndian.Uint64(hdr[24:])),
		},
		order: binary.BigEndian.Uint16(hdr[10:]),
		m:     binary.BigEndian.Uint64(hdr[32:]),
		k:     binary.BigEndian.Uint64(hdr[40:]),
		tag:   binary.BigEndian.Uint64(hdr[48:]),
		cur:   binary.BigEndian.Uint64(hdr[56:]),
		mark:  binary.BigEndian.Uint64(hdr[64:]),
	}, nil
}

// ReadFrom reads a snapshot written by WriteTo for an identical cfg. It reads
// exactly the snapshot's bytes from r; wrap a file in a bufio.Reader.
//
// A damaged snapshot gives a *CorruptError, one written by another format
// version (format 1, before generations grew, included) or for another
// configuration a *MismatchError; other errors come from r. In every case
// the caller rebuilds the filter from the exact store. The restored
// filter's newest generation is the snapshot's: call Advance with the
// present generation next.
func ReadFrom(r io.Reader, cfg Config) (*Filter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cr := &crcReader{r: r}
	h, err := readHeader(cr)
	if err != nil {
		return nil, err
	}
	f := newFilter(cfg, h.cur)
	for _, c := range []struct {
		field     string
		got, want uint64
		format    func(uint64) string
	}{
		{"filter.generations", uint64(h.cfg.Generations), uint64(cfg.Generations), formatUint},
		{"filter.keys_per_generation", uint64(h.cfg.KeysPerGeneration), uint64(cfg.KeysPerGeneration), formatUint},
		{"filter.false_positive_rate", math.Float64bits(h.cfg.FalsePositiveRate), math.Float64bits(cfg.FalsePositiveRate), formatFloatBits},
		{"bloom parameters m", h.m, f.m, formatUint},
		{"bloom parameters k", h.k, f.k, formatUint},
		{"bitset byte order", uint64(h.order), uint64(wordOrderFlag()), formatOrder},
	} {
		if c.got != c.want {
			return nil, &MismatchError{Field: c.field, Snapshot: c.format(c.got), Want: c.format(c.want)}
		}
	}

	f.tag, f.mark = h.tag, h.mark
	idx := f.head
	for i := range f.nlive {
		if err := f.readSlot(cr, idx, f.cur-uint64(i)); err != nil {
			return nil, err
		}
		idx = f.prev(idx)
	}
	f.relink() // readSlot may have replaced a bitset

	computed := cr.crc
	var trailer [4]byte
	if err := cr.readFull(trailer[:]); err != nil {
		return nil, err
	}
	if got := binary.BigEndian.Uint32(trailer[:]); got != computed {
		return nil, &CorruptError{Offset: cr.n, Reason: fmt.Sprintf("checksum %08x, computed %08x", got, computed)}
	}
	return f, nil
}

// snapshotSize is the number of bytes WriteTo writes.
func (f *Filter) snapshotSize() int64 {
	n := int64(headerLen + 4 + 4)
	idx := f.head
	for range f.nlive {
		n += genHeaderLen
		for j := range f.slots[idx].subs {
			n += bloomHeaderLen + int64(f.slots[idx].subs[j].m/8)
		}
		idx = f.prev(idx)
	}
	return n
}

// readSlot fills slots[idx], fresh from newFilter, with the generation gen.
func (f *Filter) readSlot(cr *crcReader, idx int, gen uint64) error {
	var gh [genHeaderLen]byte
	if err := cr.readFull(gh[:]); err != nil {
		return err
	}
	if got := binary.BigEndian.Uint64(gh[0:]); got != gen {
		return &CorruptError{Offset: cr.n, Reason: fmt.Sprintf("generation %d where %d belongs", got, gen)}
	}
	s := &f.slots[idx]
	s.added = binary.BigEndian.Uint64(gh[8:])
	// Check the count before allocating for it: the sizes of the
	// sub-filters come from the configuration, not from the snapshot.
	n := binary.BigEndian.Uint32(gh[16:])
	if limit := f.cfg.maxSubs(); n < 1 || n > uint32(limit) {
		return &CorruptError{Offset: cr.n, Reason: fmt.Sprintf("generation %d: %d sub-filters, want 1 to %d", gen, n, limit)}
	}
	for j := range int(n) {
		if j > 0 {
			s.subs = append(s.subs, f.mem.newSub(f.cfg.shape(j)))
			f.grown |= 1 << idx
		}
		if err := s.subs[j].read(cr, gen, j); err != nil {
			return err
		}
	}
	return nil
}

// chunkWords is how many words writeTo and read gather or scatter at a time.
const chunkWords = 128

// writeTo writes s as bloom.BloomFilter.WriteTo writes a filter of its m
// and k (see the package documentation): m and k, the bitset's length,
// then its words in block order, which for a first sub-filter are gathered
// from its lane of the rows.
func (s *sub) writeTo(w io.Writer) error {
	order := bitset.BinaryOrder()
	var buf [8 * chunkWords]byte
	binary.BigEndian.PutUint64(buf[0:], s.m)
	binary.BigEndian.PutUint64(buf[8:], s.k)
	order.PutUint64(buf[16:], s.m)
	if _, err := w.Write(buf[:bloomHeaderLen]); err != nil {
		return err
	}
	n := 0
	for off := s.lane; off < s.nblocks*s.stride; off += s.stride {
		for _, word := range s.words[off : off+s.bw] {
			order.PutUint64(buf[8*n:], word)
			n++
		}
		if n == chunkWords {
			if _, err := w.Write(buf[:]); err != nil {
				return err
			}
			n = 0
		}
	}
	_, err := w.Write(buf[:8*n])
	return err
}

// read fills s, already sized, with sub-filter j of generation gen.
func (s *sub) read(cr *crcReader, gen uint64, j int) error {
	var bh [bloomHeaderLen]byte
	if err := cr.readFull(bh[:]); err != nil {
		return err
	}
	// Check the sizes before bitset.ReadFrom trusts them with an allocation.
	if gm, gk, gl := binary.BigEndian.Uint64(bh[0:]), binary.BigEndian.Uint64(bh[8:]), bitset.BinaryOrder().Uint64(bh[16:]); gm != s.m || gk != s.k || gl != s.m {
		return &CorruptError{Offset: cr.n, Reason: fmt.Sprintf("generation %d sub-filter %d: bloom m=%d k=%d bits=%d, configuration says m=%d k=%d", gen, j, gm, gk, gl, s.m, s.k)}
	}
	// The words, scattered into s's blocks: a first sub-filter's lane of
	// the rows, or a grown one's own bitset.
	order := bitset.BinaryOrder()
	var buf [8 * chunkWords]byte
	var ones uint64
	blk := s.lane
	for left := s.m / 64; left > 0; {
		n := min(left, chunkWords)
		if _, err := io.ReadFull(cr, buf[:8*n]); err != nil {
			return cr.wrap(fmt.Sprintf("generation %d sub-filter %d bitset", gen, j), err)
		}
		for i := uint64(0); i < n; i += s.bw {
			for w := range s.bw {
				word := order.Uint64(buf[8*(i+w):])
				s.words[blk+w] = word
				ones += uint64(bits.OnesCount64(word))
			}
			blk += s.stride
		}
		left -= n
	}
	s.ones = ones
	return nil
}

func wordOrderFlag() uint16 {
	if bitset.BinaryOrder() == binary.ByteOrder(binary.LittleEndian) {
		return flagLittleEndian
	}
	return 0
}

func formatUint(v uint64) string { return strconv.FormatUint(v, 10) }

func formatFloatBits(v uint64) string {
	return strconv.FormatFloat(math.Float64frombits(v), 'g', -1, 64)
}

func formatOrder(v uint64) string {
	if v&flagLittleEndian != 0 {
		return "little-endian"
	}
	return "big-endian"
}

// crcWriter counts and checksums what passes through it.
type crcWriter struct {
	w   io.Writer
	crc uint32
	n   int64
}

func (c *crcWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

// crcReader counts and checksums what passes through it.
type crcReader struct {
	r   io.Reader
	crc uint32
	n   int64
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc = crc32.Update(c.crc, castagnoli, p[:n])
	c.n += int64(n)
	return n, err
}

func (c *crcReader) readFull(p []byte) error {
	if _, err := io.ReadFull(c, p); err != nil {
		return c.wrap("", err)
	}
	return nil
}

// wrap turns a short read into a *CorruptError and other read errors into
// plain errors naming the offset.
func (c *crcReader) wrap(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		reason := "truncated"
		if what != "" {
			reason = what + " truncated"
		}
		return &CorruptError{Offset: c.n, Reason: reason, Err: io.ErrUnexpectedEOF}
	}
	if what != "" {
		return fmt.Errorf("filter: read snapshot at byte %d: %s: %w", c.n, what, err)
	}
	return fmt.Errorf("filter: read snapshot at byte %d: %w", c.n, err)
}

// ReadConfig reads the header of a snapshot and returns the Config it was
// written for, so that a tool can load a snapshot without knowing the job's
// configuration. It checks the magic, format version and header checksum
// as ReadFrom does and reads nothing past the header.
func ReadConfig(r io.Reader) (Config, error) {
	h, err := readHeader(&crcReader{r: r})
	if err != nil {
		return Config{}, err
	}
	return h.cfg, nil
}
