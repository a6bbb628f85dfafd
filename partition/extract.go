package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/segmentio/kafka-go/protocol"
)

// DefaultMaxKeyLen is a sensible maximum encoded business-key length, in
// bytes, for callers that have no better figure: order ids and payment
// serials are far shorter, and a longer "key" is usually a misconfigured
// field pointing at a payload.
const DefaultMaxKeyLen = 1024

// Source says where in a record a key field lives.
type Source int

const (
	// SourceKey is the Kafka record key.
	SourceKey Source = iota
	// SourceHeader is the value of a record header, by header name.
	SourceHeader
	// SourceJSON is a member of the JSON record value, by dotted path.
	SourceJSON
)

// String returns the config prefix of s: "key", "header" or "json".
func (s Source) String() string {
	switch s {
	case SourceKey:
		return "key"
	case SourceHeader:
		return "header"
	case SourceJSON:
		return "json"
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// Field names one part of a business key.
type Field struct {
	Source Source
	// Name is the header name for SourceHeader and the dotted member path
	// ("order.id") for SourceJSON; it is empty for SourceKey. Header names
	// are case-sensitive, as in Kafka. JSON paths walk nested objects only;
	// a member whose name contains a dot cannot be addressed.
	Name string
}

// ParseField parses the config spelling of a field: "key", "header:NAME" or
// "json:a.b.c". Nothing is trimmed: spaces are part of header and member
// names.
func ParseField(s string) (Field, error) {
	var f Field
	switch {
	case s == "key":
		f = Field{Source: SourceKey}
	case strings.HasPrefix(s, "header:"):
		f = Field{Source: SourceHeader, Name: s[len("header:"):]}
	case strings.HasPrefix(s, "json:"):
		f = Field{Source: SourceJSON, Name: s[len("json:"):]}
	default:
		return Field{}, fmt.Errorf("partition: field %q: want key, header:NAME or json:PATH", s)
	}
	if err := f.check(); err != nil {
		return Field{}, err
	}
	return f, nil
}

// String returns the config spelling of f, which ParseField accepts back.
func (f Field) String() string {
	if f.Source == SourceKey && f.Name == "" {
		return "key"
	}
	return f.Source.String() + ":" + f.Name
}

// check returns a description of what makes f unusable, or nil.
func (f Field) check() error {
	var problem string
	switch f.Source {
	case SourceKey:
		if f.Name != "" {
			problem = "the record key takes no name"
		}
	case SourceHeader:
		if f.Name == "" {
			problem = "empty header name"
		}
	case SourceJSON:
		if f.Name == "" {
			problem = "empty JSON path"
		} else if strings.HasPrefix(f.Name, ".") || strings.HasSuffix(f.Name, ".") || strings.Contains(f.Name, "..") {
			problem = "empty member name in JSON path"
		}
	default:
		problem = "unknown source"
	}
	if problem == "" {
		return nil
	}
	return fmt.Errorf("partition: field %q: %s", f.String(), problem)
}

// Record is the part of a Kafka record that key extraction reads. Headers
// use kafka-go's protocol type so fetched records pass through unconverted.
type Record struct {
	Key, Value []byte
	Headers    []protocol.Header
}

// Extractor takes the business key out of records. It holds no per-call
// state, so one Extractor may serve any number of goroutines.
type Extractor struct {
	fields    []Field
	names     []string // config spellings, for errors
	maxKeyLen int
	// plain is the member name when the key is one top-level JSON member
	// whose name firstPlainString can compare as written (no dot, quote
	// or backslash): ExtractTrusted's shortcut. Empty otherwise.
	plain string
}

// NewExtractor returns an Extractor for a key made of fields, in order.
// maxKeyLen bounds the encoded key in bytes and must be > 0 (see
// DefaultMaxKeyLen). Every problem is reported, one per line.
func NewExtractor(fields []Field, maxKeyLen int) (*Extractor, error) {
	var errs []error
	if len(fields) == 0 {
		errs = append(errs, errors.New("partition: no key fields"))
	}
	if maxKeyLen <= 0 {
		errs = append(errs, fmt.Errorf("partition: max key length must be > 0, got %d", maxKeyLen))
	}
	for i, f := range fields {
		if err := f.check(); err != nil {
			errs = append(errs, fmt.Errorf("partition: fields[%d]: %w", i, err))
			continue
		}
		for j := range i {
			if fields[j] == f {
				errs = append(errs, fmt.Errorf("partition: fields[%d] %q: repeats fields[%d]", i, f.String(), j))
				break
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	e := &Extractor{
		fields:    append([]Field(nil), fields...),
		names:     make([]string, len(fields)),
		maxKeyLen: maxKeyLen,
	}
	for i, f := range fields {
		e.names[i] = f.String()
	}
	if len(fields) == 1 && fields[0].Source == SourceJSON && plainName(fields[0].Name) {
		e.plain = fields[0].Name
	}
	return e, nil
}

// Fields returns a copy of the fields the key is made of.
func (e *Extractor) Fields() []Field {
	return append([]Field(nil), e.fields...)
}

// MaxKeyLen returns the maximum encoded key length in bytes.
func (e *Extractor) MaxKeyLen() int {
	return e.maxKeyLen
}

// Extract appends the business key of r to dst and returns the extended
// slice. With one field the key is the field's bytes as they are; with
// several it is the composite encoding described in the package comment.
// On failure it returns dst unchanged and a *KeyError. Extract does not
// allocate when dst has room for the key.
func (e *Extractor) Extract(dst []byte, r *Record) ([]byte, error) {
	return e.extract(dst, r, false)
}

// extract is Extract, or ExtractTrusted's scan when trusted (locateTrusted
// finds the fields). Direct calls, not a function value: through one, r
// escaped, and each caller's record with it.
func (e *Extractor) extract(dst []byte, r *Record, trusted bool) ([]byte, error) {
	start := len(dst)
	composite := len(e.fields) > 1
	for i := range e.fields {
		var (
			v      jsonValue
			reason Reason
			offset int
		)
		if trusted {
			v, reason, offset = locateTrusted(&e.fields[i], r)
		} else {
			v, reason, offset = locate(&e.fields[i], r)
		}
		if reason != 0 {
			return dst[:start], keyError(reason, e.names[i], offset)
		}
		n := len(v.raw)
		if v.escaped {
			n = unescapedLen(v.raw)
		}
		if n == 0 {
			return dst[:start], keyError(EmptyKey, e.names[i], 0)
		}
		size := len(dst) - start + n
		if composite {
			size += uvarintLen(uint64(n))
		}
		if size > e.maxKeyLen {
			return dst[:start], tooLongError(e.names[i], size, e.maxKeyLen)
		}
		if composite {
			dst = binary.AppendUvarint(dst, uint64(n))
		}
		if v.escaped {
			dst = appendUnescaped(dst, v.raw)
		} else {
			dst = append(dst, v.raw...)
		}
	}
	return dst, nil
}

// EncodeKey appends the business key made of parts to dst, exactly as
// Extract would for a record whose fields hold those bytes. Tools use it to
// look a composite key up from its parts.
func EncodeKey(dst []byte, parts ...[]byte) []byte {
	if len(parts) == 1 {
		return append(dst, parts[0]...)
	}
	for _, p := range parts {
		dst = binary.AppendUvarint(dst, uint64(len(p)))
		dst = append(dst, p...)
	}
	return dst
}

// ExtractUint reads a version number from field f of r, for the "version"
// dedup mode. The record key and header values must be 1 to 20 decimal
// digits below 2^64; a JSON member must be a non-negative integer literal
// (no fraction or exponent) or a string of such digits. Failures are *KeyError values:
// FieldMissing, NotJSON and NotScalar as for keys, BadVersion for anything
// else, including an empty value.
func ExtractUint(r *Record, f Field) (uint64, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	v, reason, offset := locate(&f, r)
	if reason != 0 {
		return 0, keyError(reason, f.String(), offset)
	}
	digits := v.raw
	var buf [20]byte // the longest uint64 has 20 digits
	switch {
	case v.kind == jsonBool:
		digits = nil
	case v.escaped:
		if unescapedLen(v.raw) > len(buf) {
			digits = nil
		} else {
			digits = appendUnescaped(buf[:0], v.raw)
		}
	}
	n, ok := parseDecimal(digits)
	if !ok {
		return 0, keyError(BadVersion, f.String(), 0)
	}
	return n, nil
}

// locate finds field f in r. For the record key and headers the value is
// reported as an unescaped string.
func locate(f *Field, r *Record) (v jsonValue, reason Reason, offset int) {
	switch f.Source {
	case SourceKey:
		if r.Key == nil {
			return v, FieldMissing, 0
		}
		return jsonValue{raw: r.Key, kind: jsonString}, 0, 0
	case SourceHeader:
		// Kafka allows a name to repeat; like Java's Headers.lastHeader,
		// the last one counts.
		for i := len(r.Headers) - 1; i >= 0; i-- {
			if h := &r.Headers[i]; h.Key == f.Name {
				if h.Value == nil {
					break
				}
				return jsonValue{raw: h.Value, kind: jsonString}, 0, 0
			}
		}
		return v, FieldMissing, 0
	default: // SourceJSON; Field.check rejects other sources
		v, pos, ok := lookupJSON(r.Value, f.Name)
		switch {
		case !ok:
			return v, NotJSON, pos
		case v.kind == jsonMissing:
			return v, FieldMissing, 0
		case v.kind == jsonContainer:
			return v, NotScalar, 0
		}
		return v, 0, 0
	}
}

// parseDecimal parses 1 to 20 ASCII digits that fit in a uint64.
func parseDecimal(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		d := uint64(c - '0')
		if d > 9 || n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}
