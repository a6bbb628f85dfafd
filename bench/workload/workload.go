package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dedupstream/dedupstream/partition"
)

// Class is the kind of a generated record.
type Class uint8

const (
	// New is the first record of a key.
	New Class = iota
	// Immediate repeats one of the last ImmediateKeys keys.
	Immediate
	// Minutes repeats a key first seen 1 to 30 minutes of record time ago.
	Minutes
	// Hours repeats a key first seen 1 hour to 85 % of the window ago.
	Hours
	numClasses
)

func (c Class) String() string {
	switch c {
	case New:
		return "new"
	case Immediate:
		return "immediate"
	case Minutes:
		return "minutes"
	case Hours:
		return "hours"
	}
	return "unknown"
}

// ImmediateKeys is how far back, in keys, an Immediate repeat reaches.
const ImmediateKeys = 64

// maxReach is the share of the window no duplicate reaches beyond.
const maxReach = 0.85

// Mix gives the shares of the duplicate distance classes. The zero value
// means DefaultMix.
type Mix struct {
	Immediate float64 `json:"immediate"`
	Minutes   float64 `json:"minutes"`
	Hours     float64 `json:"hours"`
}

// DefaultMix is what production streams look like: most repeats are
// retries, some are re-reads, a few are replays.
var DefaultMix = Mix{Immediate: 0.6, Minutes: 0.25, Hours: 0.15}

// Spec describes a stream. The zero value of a field means its default.
type Spec struct {
	// Seed selects the stream. The default value is 0.
	Seed uint64 `json:"seed"`
	// KeysPerWindow is the number of distinct keys a full window holds.
	// The default value is 1,000,000.
	KeysPerWindow int `json:"keys_per_window"`
	// Window is the dedup window the stream is made for. The default value
	// is 24h.
	Window time.Duration `json:"window_ns"`
	// DupRatio is the share of records that repeat an earlier key, in
	// [0, 1). The default value is 0 (no duplicates).
	DupRatio float64 `json:"dup_ratio"`
	// Mix shares the duplicates out to distance classes. The default value
	// is DefaultMix.
	Mix Mix `json:"mix"`
	// Zipf is the skew exponent of the Minutes and Hours classes: 0 is
	// uniform, values > 1 make hot keys. The default value is 0.
	Zipf float64 `json:"zipf"`
	// PayloadBytes is the size of every record value. The default value
	// is 100.
	PayloadBytes int `json:"payload_bytes"`
	// Topics is the number of raw topics records are spread over. The
	// default value is 1.
	Topics int `json:"topics"`
	// Partitions is the partition count of the raw topics; records go to
	// the murmur2 partition of their key, as Java producers send them. The
	// default value is 1.
	Partitions int `json:"partitions"`
	// EpochMs is the record time of key 0 in Unix milliseconds. The
	// default value is 1,700,000,000,000 (November 2023).
	EpochMs int64 `json:"epoch_ms"`
}

// ApplyDefaults fills every zero field with its default.
func (s *Spec) ApplyDefaults() {
	if s.KeysPerWindow == 0 {
		s.KeysPerWindow = 1_000_000
	}
	if s.Window == 0 {
		s.Window = 24 * time.Hour
	}
	if s.Mix == (Mix{}) {
		s.Mix = DefaultMix
	}
	if s.PayloadBytes == 0 {
		s.PayloadBytes = 100
	}
	if s.Topics == 0 {
		s.Topics = 1
	}
	if s.Partitions == 0 {
		s.Partitions = 1
	}
	if s.EpochMs == 0 {
		s.EpochMs = 1_700_000_000_000
	}
}

// Validate reports every problem of a defaulted Spec.
func (s *Spec) Validate() error {
	var errs []error
	if s.KeysPerWindow < 1 {
		errs = append(errs, fmt.Errorf("workload: keys_per_window must be >= 1, got %d", s.KeysPerWindow))
	}
	if s.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("workload: window must be >= 1ms, got %v", s.Window))
	}
	if s.DupRatio < 0 || s.DupRatio >= 1 {
		errs = append(errs, fmt.Errorf("workload: dup_ratio must be in [0, 1), got %v", s.DupRatio))
	}
	if m := s.Mix; m.Immediate < 0 || m.Minutes < 0 || m.Hours < 0 || m.Immediate+m.Minutes+m.Hours <= 0 {
		errs = append(errs, fmt.Errorf("workload: mix shares must be >= 0 with a positive sum, got %+v", m))
	}
	if s.Zipf != 0 && s.Zipf <= 1 {
		errs = append(errs, fmt.Errorf("workload: zipf must be 0 or > 1, got %v", s.Zipf))
	}
	if s.PayloadBytes < 0 {
		errs = append(errs, fmt.Errorf("workload: payload_bytes must be >= 0, got %d", s.PayloadBytes))
	}
	if s.Topics < 1 || s.Partitions < 1 {
		errs = append(errs, fmt.Errorf("workload: topics and partitions must be >= 1, got %d and %d", s.Topics, s.Partitions))
	}
	return errors.Join(errs...)
}

// StepMs is the record time between two new keys.
func (s Spec) StepMs() float64 {
	return float64(s.Window.Milliseconds()) / float64(s.KeysPerWindow)
}

// Record is one generated record. Key aliases the generator's arena and
// Value its payload buffer: both stay valid until the next Fill.
type Record struct {
	ID          uint64 // key id: the ID-th distinct key of the stream
	Key         []byte
	Value       []byte
	TimestampMs int64
	Topic       int // index of the raw topic
	Partition   int
	Class       Class
}

// Counts are the records made so far, by class.
type Counts struct {
	Records uint64
	// New is the number of distinct keys, which is the number of records a
	// correct deduplicator emits.
	New uint64
	// Dups counts duplicates by class (index Immediate, Minutes, Hours).
	Dups [numClasses]uint64
}

// Duplicates is the number of duplicates made: what a correct deduplicator
// drops.
func (c Counts) Duplicates() uint64 { return c.Records - c.New }

// span is a class's reach back in keys: [lo, hi).
type span struct{ lo, hi uint64 }

// Generator makes the stream of a Spec. It is not safe for concurrent use.
type Generator struct {
	spec    Spec
	rng     *rand.Rand
	zipf    [numClasses]*rand.Zipf
	spans   [numClasses]span
	quantum [numClasses]uint64 // keys a Zipf rank keeps naming the same key
	cum     [numClasses]float64
	dup     float64
	counts  Counts
	payload []byte
	arena   []byte
	recs    []Record
}

// NewGenerator returns the generator of spec, defaulted and validated.
func NewGenerator(spec Spec) (*Generator, error) {
	spec.ApplyDefaults()
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{spec: spec, dup: spec.DupRatio}
	g.rng = rand.New(rand.NewPCG(spec.Seed, 0x6465647570))
	step := spec.StepMs()
	reach := uint64(maxReach * float64(spec.KeysPerWindow))
	keysBack := func(d time.Duration) uint64 {
		return max(1, uint64(float64(d.Milliseconds())/step))
	}
	clip := func(s span) span {
		s.hi = min(s.hi, max(reach, 2))
		s.lo = max(1, min(s.lo, s.hi/2))
		return s
	}
	g.spans[Immediate] = span{1, ImmediateKeys + 1}
	g.spans[Minutes] = clip(span{keysBack(time.Minute), keysBack(30*time.Minute) + 1})
	g.spans[Hours] = clip(span{keysBack(time.Hour), reach})
	m := spec.Mix
	sum := m.Immediate + m.Minutes + m.Hours
	g.cum[Immediate] = m.Immediate / sum
	g.cum[Minutes] = g.cum[Immediate] + m.Minutes/sum
	g.cum[Hours] = 1
	if spec.Zipf > 1 {
		for _, c := range []Class{Minutes, Hours} {
			sp := g.spans[c]
			if sp.hi <= sp.lo+4 {
				continue
			}
			g.quantum[c] = (sp.hi - sp.lo) / 4
			g.zipf[c] = rand.NewZipf(g.rng, spec.Zipf, 1, sp.hi-sp.lo-g.quantum[c]-1)
		}
	}
	// The payload: printable bytes a few times the value size, so values
	// of nearby records differ.
	g.payload = make([]byte, spec.PayloadBytes+256)
	prng := rand.New(rand.NewPCG(spec.Seed, 0x7061796c6f6164))
	for i := range g.payload {
		g.payload[i] = 'a' + byte(prng.IntN(26))
	}
	return g, nil
}

// Spec returns the defaulted spec.
func (g *Generator) Spec() Spec { return g.spec }

// Counts returns what was generated so far.
func (g *Generator) Counts() Counts { return g.counts }

// SetDupRatio changes the duplicate ratio from the next record on; 0 makes
// only new keys (the harness pre-fills a window that way).
func (g *Generator) SetDupRatio(r float64) { g.dup = r }

// FirstTimestampMs is the record time of key id's first record.
func (g *Generator) FirstTimestampMs(id uint64) int64 {
	return g.spec.EpochMs + int64(float64(id)*g.spec.StepMs())
}

// keyPad pads keys to 16..36 bytes.
const keyPad = "-abcdefghijklmnopqrst"

// KeyPrefix starts every generated key.
const KeyPrefix = "ord-"

// AppendKey appends the business key of id to dst.
func AppendKey(dst []byte, id uint64) []byte {
	dst = append(dst, KeyPrefix...)
	var digits [12]byte
	v := id
	for i := len(digits) - 1; i >= 0; i-- {
		digits[i] = '0' + byte(v%10)
		v /= 10
	}
	dst = append(dst, digits[:]...)
	return append(dst, keyPad[:id%uint64(len(keyPad))]...)
}

// ParseKey returns the id of a key made by AppendKey.
func ParseKey(key []byte) (uint64, bool) {
	const n = len(KeyPrefix) + 12
	if len(key) < n || string(key[:len(KeyPrefix)]) != KeyPrefix {
		return 0, false
	}
	var id uint64
	for _, c := range key[len(KeyPrefix):n] {
		if c < '0' || c > '9' {
			return 0, false
		}
		id = id*10 + uint64(c-'0')
	}
	if len(key)-n != int(id%uint64(len(keyPad))) || string(key[n:]) != keyPad[:len(key)-n] {
		return 0, false
	}
	return id, true
}

// pick chooses the class and key id of the next record.
func (g *Generator) pick() (uint64, Class) {
	next := g.counts.New
	if g.dup <= 0 || next == 0 || g.rng.Float64() >= g.dup {
		return next, New
	}
	u := g.rng.Float64()
	c := Immediate
	for u >= g.cum[c] && c < Hours {
		c++
	}
	sp := g.spans[c]
	if next < sp.lo {
		// Not far enough into the stream for this class: a new key.
		return next, New
	}
	if next < sp.hi {
		// The class reaches back only as far as the stream goes.
		sp.hi = next + 1
	} else if z := g.zipf[c]; z != nil {
		// Ranks name fixed keys while the anchor stays put: hot keys.
		q := g.quantum[c]
		anchor := next - next%q
		off := (z.Uint64() * 0x9E3779B97F4A7C15) % (sp.hi - sp.lo - q)
		if anchor >= sp.lo+off+1 {
			return anchor - sp.lo - off, c
		}
	}
	return next - sp.lo - g.rng.Uint64N(sp.hi-sp.lo), c
}

// next makes one record into r. r.Key is appended to the generator's arena.
func (g *Generator) next(r *Record) {
	id, c := g.pick()
	if c == New {
		g.counts.New++
	} else {
		g.counts.Dups[c]++
	}
	g.counts.Records++
	start := len(g.arena)
	g.arena = AppendKey(g.arena, id)
	r.ID = id
	r.Class = c
	r.Key = g.arena[start:len(g.arena):len(g.arena)]
	off := (id*7 + uint64(c)*61 + g.counts.Records%3) % 256
	r.Value = g.payload[off : off+uint64(g.spec.PayloadBytes) : off+uint64(g.spec.PayloadBytes)]
	r.TimestampMs = g.FirstTimestampMs(g.counts.New - 1)
	r.Partition = 0
	if g.spec.Partitions > 1 {
		r.Partition = partition.Murmur2Partition(r.Key, g.spec.Partitions)
	}
	r.Topic = 0
	if g.spec.Topics > 1 {
		r.Topic = g.rng.IntN(g.spec.Topics)
	}
}

// Fill makes the next n records. The returned slice, its keys and values
// are reused by the next Fill.
func (g *Generator) Fill(n int) []Record {
	if cap(g.recs) < n {
		g.recs = make([]Record, n)
		g.arena = make([]byte, 0, n*40)
	}
	g.arena = g.arena[:0]
	recs := g.recs[:n]
	for i := range recs {
		g.next(&recs[i])
	}
	return recs
}
