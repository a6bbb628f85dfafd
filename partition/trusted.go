package partition

import (
	"bytes"
	"strings"
	"unsafe"
)

// This file is the restore's fast path: reading the key back from records
// of the output topic, which a stage keyed (and so validated) once already.
// Validating them again was most of a restore's CPU (BenchmarkRestore). The
// scanner below finds a top-level member without validating what it skips:
// it follows only the structure (strings, with their escapes, and nesting),
// the way the validating scanner walks a valid text. On every text
// encoding/json accepts it finds exactly what lookupJSON finds (the fuzz
// target FuzzExtractTrusted checks this against lookupJSON and
// encoding/json); on anything it does not expect it gives up and the
// validating scanner decides.

// ExtractTrusted is Extract for records validated before, such as those
// read back from the output topic: a top-level JSON member is found
// without validating the rest of the text. On a valid JSON text the result
// is Extract's; on an invalid one it may be a key where Extract reports
// NotJSON.
func (e *Extractor) ExtractTrusted(dst []byte, r *Record) ([]byte, error) {
	if e.plain != "" {
		// The shape of most records, in place: a non-empty string without
		// escapes is the key as it is (extract's other checks hold by
		// construction; the length is checked here). Anything else takes
		// extract's path, which may call firstPlainString again.
		if v, ok := firstPlainString(r.Value, e.plain); ok && len(v.raw) <= e.maxKeyLen {
			return append(dst, v.raw...), nil
		}
	}
	return e.extract(dst, r, true)
}

// plainName reports whether name is a top-level member name that
// firstPlainString compares as written: no dot (a path), quote or
// backslash (an escape in the text).
func plainName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `."\`)
}

// locateTrusted is locate with the fast path for a top-level JSON member.
func locateTrusted(f *Field, r *Record) (jsonValue, Reason, int) {
	if f.Source == SourceJSON && !strings.Contains(f.Name, ".") {
		if v, ok := lookupTopLevel(r.Value, f.Name); ok {
			switch v.kind {
			case jsonMissing:
				return v, FieldMissing, 0
			case jsonContainer:
				return v, NotScalar, 0
			}
			return v, 0, 0
		}
	}
	return locate(f, r)
}

// lookupTopLevel returns the value of the last top-level member name of the
// object data, classified as lookupJSON does. ok is false when data is not
// shaped as expected (not an object, truncated, stray bytes): the caller
// then asks lookupJSON.
func lookupTopLevel(data []byte, name string) (found jsonValue, ok bool) {
	if plainName(name) {
		if v, ok := firstPlainString(data, name); ok {
			return v, true
		}
	}
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return found, false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return found, skipSpace(data, i+1) == len(data)
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return found, false
		}
		end, escaped, sok := scanString(data, i)
		if !sok {
			return found, false
		}
		match := nameEquals(data[i+1:end-1], escaped, name)
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return found, false
		}
		i = skipSpace(data, i+1)
		start := i
		if i, sok = scanValue(data, i); !sok {
			return found, false
		}
		if match {
			found = classify(data[start:i])
			if noLaterMember(data[i:], name) {
				// On a valid text nothing after this can change the
				// result: the rest is not scanned (most of a flat record,
				// whose key is usually its first member).
				return found, true
			}
		}
		i = skipSpace(data, i)
		if i >= len(data) {
			return found, false
		}
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
		case '}':
			return found, skipSpace(data, i+1) == len(data)
		default:
			return found, false
		}
	}
}

// firstPlainString is lookupTopLevel's path for the shape of most records
// (and every record of BenchmarkRestore): the text starts with the member
// name, written as is, then its value, a string without escapes, and no
// later member can have that name (noLaterMember). Checking the bytes of
// that shape in place spares the member scan: about a fifth of
// ExtractTrusted's time per flat record (BenchmarkExtract/json_flat_trusted)
// and of a restore's keying (BenchmarkRestore profile). ok is false for any
// other shape: the caller scans.
//
// On a valid text the result is the scan's: the first member's name string
// ends at the first quote after it (name must be plainName's: a name
// holding a quote or a backslash is never taken here), so the bytes
// compared are that name unescaped.
func firstPlainString(data []byte, name string) (jsonValue, bool) {
	n := len(name)
	if len(data) < n+7 || data[0] != '{' || data[1] != '"' || string(data[2:2+n]) != name ||
		data[2+n] != '"' || data[3+n] != ':' || data[4+n] != '"' {
		return jsonValue{}, false
	}
	s := data[5+n:]
	// The value's end and any escape in it, in one pass: keys are short,
	// and a byte loop beats two bytes.IndexByte calls here.
	end := -1
	for j, c := range s {
		if c == '"' {
			end = j
			break
		}
		if c == '\\' {
			return jsonValue{}, false
		}
	}
	if end <= 0 || !noLaterMember(s[end+1:], name) {
		return jsonValue{}, false
	}
	return jsonValue{raw: s[:end], kind: jsonString}, true
}

// scanString returns the offset after the string starting at data[i] ==
// '"' and whether it holds escapes. It checks nothing but where it ends: a
// backslash escapes the byte after it (in \uXXXX the 'u'). Strings in
// records are short: a byte loop beats bytes.IndexByte's call here.
func scanString(data []byte, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '"':
			return j + 1, escaped, true
		case '\\':
			escaped = true
			j++
		}
	}
	return len(data), escaped, false
}

// scanValue returns the offset after the value starting at data[i]: a
// string, a container (strings inside it skipped as such) or a scalar,
// which ends at the first delimiter.
func scanValue(data []byte, i int) (int, bool) {
	if i >= len(data) {
		return i, false
	}
	switch data[i] {
	case '"':
		end, _, ok := scanString(data, i)
		return end, ok
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				end, _, ok := scanString(data, i)
				if !ok {
					return end, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return i, false
	case ',', '}', ']', ':':
		return i, false
	default:
		start := i
		for i < len(data) {
			switch data[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i, i > start
			}
			i++
		}
		return i, false
	}
}

// noLaterMember reports whether rest, the text after a member's value,
// cannot hold another member named name, on a valid text: it holds no
// backslash, so any member name in it is written as is, and name never
// appears in it between quotes. Two vectorised searches instead of the
// scan of every byte; when in doubt (a backslash, the name quoted in a
// nested object or a string), false, and the caller scans on.
func noLaterMember(rest []byte, name string) bool {
	if len(name) == 0 || bytes.IndexByte(rest, '\\') >= 0 {
		return false
	}
	// The name's bytes, read only (no copy per record).
	nb := unsafe.Slice(unsafe.StringData(name), len(name))
	for {
		k := bytes.Index(rest, nb)
		if k < 0 {
			return true
		}
		if k > 0 && rest[k-1] == '"' && k+len(nb) < len(rest) && rest[k+len(nb)] == '"' {
			return false
		}
		rest = rest[k+1:]
	}
}
