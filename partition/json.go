package partition

import (
	"bytes"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a validating JSON scanner that finds the value at a dotted
// path without building a tree and without allocating. It accepts exactly
// the texts encoding/json's Valid accepts (the fuzz target checks this), so
// "not JSON" means the same thing here as in every Go tool an operator would
// reach for.
//
// The whole text is always scanned, not only up to the field: a record whose
// tail is garbage is malformed and belongs in the DLQ, and an object that
// repeats a name must resolve to the last occurrence (encoding/json, Jackson
// and JSON.parse all keep the last one), which is only known at the end.

// maxJSONDepth is encoding/json's nesting limit: 10000 nested containers are
// valid, 10001 are not.
const maxJSONDepth = 10000

type jsonKind uint8

const (
	jsonMissing   jsonKind = iota // absent, or null
	jsonString                    // raw is the text between the quotes
	jsonNumber                    // raw is the literal, such as -1.5e3
	jsonBool                      // raw is true or false
	jsonContainer                 // an object or an array
)

// jsonValue is the raw text of a scalar found by lookupJSON.
type jsonValue struct {
	raw     []byte
	kind    jsonKind
	escaped bool // raw (a string) contains backslash escapes
}

// lookupJSON validates data as one JSON text and returns the value at path,
// a dotted list of object member names. When data is not valid JSON it
// returns ok false and the offset at which scanning stopped.
func lookupJSON(data []byte, path string) (v jsonValue, pos int, ok bool) {
	i := skipSpace(data, 0)
	if i < len(data) && data[i] == '{' {
		i, v, ok = walkObject(data, i, path, 1)
	} else {
		// Valid JSON that is not an object has no members: the field is
		// missing, but the text must still be checked.
		i, ok = skipValue(data, i, 0)
	}
	if !ok {
		return jsonValue{}, i, false
	}
	if i = skipSpace(data, i); i != len(data) {
		return jsonValue{}, i, false
	}
	return v, 0, true
}

// walkObject scans the object starting at data[i] == '{', which is nested
// depth containers deep (1 for the top level), and returns the end of the
// object and the value at path inside it.
func walkObject(data []byte, i int, path string, depth int) (int, jsonValue, bool) {
	if depth > maxJSONDepth {
		return i, jsonValue{}, false
	}
	name, rest, nested := strings.Cut(path, ".")
	var found jsonValue
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return i + 1, found, true
	}
	for {
		nameStart := i + 1
		end, escaped, ok := skipString(data, i)
		if !ok {
			return end, found, false
		}
		match := nameEquals(data[nameStart:end-1], escaped, name)
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return i, found, false
		}
		i = skipSpace(data, i+1)
		switch {
		case !match:
			i, ok = skipValue(data, i, depth)
		case nested && i < len(data) && data[i] == '{':
			i, found, ok = walkObject(data, i, rest, depth+1)
		default:
			start := i
			i, ok = skipValue(data, i, depth)
			// A later duplicate replaces an earlier one, even when the
			// later one cannot hold the rest of the path.
			found = jsonValue{}
			if ok && !nested {
				found = classify(data[start:i])
			}
		}
		if !ok {
			return i, found, false
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return i, found, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return i + 1, found, true
		default:
			return i, found, false
		}
	}
}

// classify describes a complete, valid value.
func classify(v []byte) jsonValue {
	switch v[0] {
	case '"':
		s := v[1 : len(v)-1]
		return jsonValue{raw: s, kind: jsonString, escaped: bytes.IndexByte(s, '\\') >= 0}
	case 'n':
		return jsonValue{}
	case 't', 'f':
		return jsonValue{raw: v, kind: jsonBool}
	case '{', '[':
		return jsonValue{kind: jsonContainer}
	default:
		return jsonValue{raw: v, kind: jsonNumber}
	}
}

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipValue validates the value starting at data[i], inside depth
// containers, and returns the offset just after it.
func skipValue(data []byte, i, depth int) (int, bool) {
	if i >= len(data) {
		return i, false
	}
	switch data[i] {
	case '{', '[':
		return skipContainer(data, i, depth)
	default:
		return skipScalar(data, i)
	}
}

func skipScalar(data []byte, i int) (int, bool) {
	switch data[i] {
	case '"':
		end, _, ok := skipString(data, i)
		return end, ok
	case 't':
		return skipLiteral(data, i, "true")
	case 'f':
		return skipLiteral(data, i, "false")
	case 'n':
		return skipLiteral(data, i, "null")
	default:
		return skipNumber(data, i)
	}
}

// skipContainer validates the object or array starting at data[i] without
// recursion: a bit stack remembers, per open container, whether it is an
// object. Texts nested deeper than 64 levels cost one allocation.
func skipContainer(data []byte, i, depth int) (int, bool) {
	var small [1]uint64
	st := bitstack{w: small[:]}
	var ok bool
	for {
		// data[i] starts a value.
		if i >= len(data) {
			return i, false
		}
		if c := data[i]; c == '{' || c == '[' {
			if depth+st.n >= maxJSONDepth {
				return i, false
			}
			st.push(c == '{')
			i = skipSpace(data, i+1)
			if i >= len(data) {
				return i, false
			}
			if data[i] != c+2 { // '{'+2 == '}', '['+2 == ']'
				if c == '{' {
					if i, ok = skipMemberName(data, i); !ok {
						return i, false
					}
				}
				continue
			}
			st.n--
			i++
		} else if i, ok = skipScalar(data, i); !ok {
			return i, false
		}
		// A value has ended: close containers until the next element.
		for {
			if st.n == 0 {
				return i, true
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return i, false
			}
			inObject := st.top()
			if data[i] == ',' {
				i = skipSpace(data, i+1)
				if inObject {
					if i, ok = skipMemberName(data, i); !ok {
						return i, false
					}
				}
				break
			}
			if (inObject && data[i] != '}') || (!inObject && data[i] != ']') {
				return i, false
			}
			st.n--
			i++
		}
	}
}

// skipMemberName validates `"name" :` at data[i] and returns the offset of
// the member's value.
func skipMemberName(data []byte, i int) (int, bool) {
	i, _, ok := skipString(data, i)
	if !ok {
		return i, false
	}
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != ':' {
		return i, false
	}
	return skipSpace(data, i+1), true
}

// plainString marks the bytes that stand for themselves inside a JSON
// string. Bytes >= 0x80 are accepted unchecked, as encoding/json's scanner
// does.
var plainString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipString validates the string starting at data[i] and returns the offset
// after its closing quote and whether it contains escapes.
func skipString(data []byte, i int) (end int, escaped bool, ok bool) {
	if i >= len(data) || data[i] != '"' {
		return i, false, false
	}
	i++
	for {
		for i < len(data) && plainString[data[i]] {
			i++
		}
		if i >= len(data) {
			return i, escaped, false
		}
		switch data[i] {
		case '"':
			return i + 1, escaped, true
		case '\\':
			escaped = true
			if i+1 >= len(data) {
				return i + 1, escaped, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(data) || hexVal(data[k]) < 0 {
						return k, escaped, false
					}
				}
				i += 6
			default:
				return i + 1, escaped, false
			}
		default: // a control character
			return i, escaped, false
		}
	}
}

func skipLiteral(data []byte, i int, lit string) (int, bool) {
	if len(data)-i >= len(lit) && string(data[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

// skipNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func skipNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	if i >= len(data) {
		return i, false
	}
	switch c := data[i]; {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i = skipDigits(data, i+1)
	default:
		return i, false
	}
	if i < len(data) && data[i] == '.' {
		j := skipDigits(data, i+1)
		if j == i+1 {
			return j, false
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := skipDigits(data, i)
		if j == i {
			return j, false
		}
		i = j
	}
	return i, true
}

func skipDigits(data []byte, i int) int {
	for i < len(data) && '0' <= data[i] && data[i] <= '9' {
		i++
	}
	return i
}

func hexVal(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

// hex4 decodes four hex digits that skipString has already checked.
func hex4(b []byte) rune {
	return hexVal(b[0])<<12 | hexVal(b[1])<<8 | hexVal(b[2])<<4 | hexVal(b[3])
}

// decodeEscape decodes the escape at raw[k] == '\\' of a string that
// skipString accepted and returns the rune and the bytes consumed. Like
// encoding/json, a valid surrogate pair becomes one rune and any other
// surrogate becomes U+FFFD.
func decodeEscape(raw []byte, k int) (rune, int) {
	switch c := raw[k+1]; c {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r := hex4(raw[k+2 : k+6])
		if !utf16.IsSurrogate(r) {
			return r, 6
		}
		if k+12 <= len(raw) && raw[k+6] == '\\' && raw[k+7] == 'u' {
			if pair := utf16.DecodeRune(r, hex4(raw[k+8:k+12])); pair != utf8.RuneError {
				return pair, 12
			}
		}
		return utf8.RuneError, 6
	default: // '"', '\\', '/'
		return rune(c), 2
	}
}

// unescapedLen returns the length of the string content raw once decoded.
func unescapedLen(raw []byte) int {
	n := 0
	for k := 0; k < len(raw); {
		if raw[k] != '\\' {
			n++
			k++
			continue
		}
		r, w := decodeEscape(raw, k)
		n += utf8.RuneLen(r)
		k += w
	}
	return n
}

// appendUnescaped appends the decoded string content raw to dst. Bytes that
// are not escapes are copied as they are, even when they are not valid
// UTF-8: two different keys must stay different.
func appendUnescaped(dst, raw []byte) []byte {
	for len(raw) > 0 {
		k := bytes.IndexByte(raw, '\\')
		if k < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:k]...)
		r, w := decodeEscape(raw, k)
		dst = utf8.AppendRune(dst, r)
		raw = raw[k+w:]
	}
	return dst
}

// nameEquals reports whether the member name raw (string content, escapes
// not decoded) equals name.
func nameEquals(raw []byte, escaped bool, name string) bool {
	if !escaped {
		return string(raw) == name
	}
	j := 0
	for k := 0; k < len(raw); {
		if raw[k] != '\\' {
			if j >= len(name) || name[j] != raw[k] {
				return false
			}
			j++
			k++
			continue
		}
		r, w := decodeEscape(raw, k)
		var buf [utf8.UTFMax]byte
		n := utf8.EncodeRune(buf[:], r)
		if len(name)-j < n || name[j:j+n] != string(buf[:n]) {
			return false
		}
		j += n
		k += w
	}
	return j == len(name)
}

// bitstack is a stack of booleans (true = object) for skipContainer.
type bitstack struct {
	w []uint64
	n int
}

func (s *bitstack) push(obj bool) {
	if s.n == len(s.w)*64 {
		w := make([]uint64, 2*len(s.w))
		copy(w, s.w)
		s.w = w
	}
	word, bit := s.n/64, uint(s.n%64)
	if obj {
		s.w[word] |= 1 << bit
	} else {
		s.w[word] &^= 1 << bit
	}
	s.n++
}

func (s *bitstack) top() bool {
	n := s.n - 1
	return s.w[n/64]&(1<<uint(n%64)) != 0
}
