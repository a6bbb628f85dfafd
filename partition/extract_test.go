package partition

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go/protocol"
)

func TestParseField(t *testing.T) {
	tests := []struct {
		in      string
		want    Field
		wantErr string
	}{
		{in: "key", want: Field{Source: SourceKey}},
		{in: "header:event-id", want: Field{Source: SourceHeader, Name: "event-id"}},
		{in: "header:a:b", want: Field{Source: SourceHeader, Name: "a:b"}},
		{in: "header: spaced ", want: Field{Source: SourceHeader, Name: " spaced "}},
		{in: "json:id", want: Field{Source: SourceJSON, Name: "id"}},
		{in: "json:order.payment.id", want: Field{Source: SourceJSON, Name: "order.payment.id"}},
		{in: "json:ünï.😀", want: Field{Source: SourceJSON, Name: "ünï.😀"}},
		{in: "", wantErr: `partition: field "": want key, header:NAME or json:PATH`},
		{in: "Key", wantErr: `partition: field "Key": want key`},
		{in: " key", wantErr: `want key`},
		{in: "key:x", wantErr: `want key`},
		{in: "value:x", wantErr: `want key`},
		{in: "header:", wantErr: `partition: field "header:": empty header name`},
		{in: "json:", wantErr: `partition: field "json:": empty JSON path`},
		{in: "json:.a", wantErr: `empty member name in JSON path`},
		{in: "json:a.", wantErr: `empty member name in JSON path`},
		{in: "json:a..b", wantErr: `empty member name in JSON path`},
		{in: "json:.", wantErr: `empty member name in JSON path`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseField(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseField(%q) error = %v, want it to contain %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseField(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseField(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Fatalf("String() = %q, want %q", s, tt.in)
			}
		})
	}
}

func TestSourceString(t *testing.T) {
	for s, want := range map[Source]string{SourceKey: "key", SourceHeader: "header", SourceJSON: "json", 7: "Source(7)"} {
		if got := s.String(); got != want {
			t.Errorf("Source(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}

func TestNewExtractorValidation(t *testing.T) {
	tests := []struct {
		name      string
		fields    []Field
		max       int
		wantLines []string
	}{
		{name: "no fields", max: 10, wantLines: []string{"partition: no key fields"}},
		{name: "zero max", fields: []Field{{Source: SourceKey}}, max: 0,
			wantLines: []string{"partition: max key length must be > 0, got 0"}},
		{name: "every problem", max: -1,
			fields: []Field{{Source: SourceKey}, {Source: SourceHeader}, {Source: SourceKey}, {Source: 9, Name: "x"}, {Source: SourceKey, Name: "x"}},
			wantLines: []string{
				"partition: max key length must be > 0, got -1",
				`partition: fields[1]: partition: field "header:": empty header name`,
				`partition: fields[2] "key": repeats fields[0]`,
				`partition: fields[3]: partition: field "Source(9):x": unknown source`,
				`partition: fields[4]: partition: field "key:x": the record key takes no name`,
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewExtractor(tt.fields, tt.max)
			if err == nil || e != nil {
				t.Fatalf("NewExtractor = %v, %v; want an error", e, err)
			}
			if got := strings.Split(err.Error(), "\n"); !equalStrings(got, tt.wantLines) {
				t.Fatalf("error lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.wantLines, "\n"))
			}
		})
	}

	fields := []Field{{Source: SourceJSON, Name: "a"}, {Source: SourceHeader, Name: "h"}}
	e, err := NewExtractor(fields, 5)
	if err != nil {
		t.Fatal(err)
	}
	fields[0].Name = "changed"
	if got := e.Fields(); got[0].Name != "a" || len(got) != 2 || e.MaxKeyLen() != 5 {
		t.Fatalf("Fields() = %+v, MaxKeyLen() = %d: the extractor must keep its own copy", got, e.MaxKeyLen())
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fataler is what the test helpers need from *testing.T, *testing.F and
// *rapid.T.
type fataler interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

func mustExtractor(t fataler, max int, specs ...string) *Extractor {
	t.Helper()
	fields := make([]Field, len(specs))
	for i, s := range specs {
		f, err := ParseField(s)
		if err != nil {
			t.Fatal(err)
		}
		fields[i] = f
	}
	e, err := NewExtractor(fields, max)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func hdrs(kv ...string) []protocol.Header {
	var hs []protocol.Header
	for i := 0; i < len(kv); i += 2 {
		hs = append(hs, protocol.Header{Key: kv[i], Value: []byte(kv[i+1])})
	}
	return hs
}

// uv is the test's own composite encoding: a length byte per part (parts
// here are shorter than 128 bytes, where a uvarint is that one byte).
func uv(parts ...string) string {
	var b []byte
	for _, p := range parts {
		if len(p) >= 128 {
			panic("uv: part too long for the one-byte form")
		}
		b = append(b, byte(len(p)))
		b = append(b, p...)
	}
	return string(b)
}

func TestExtract(t *testing.T) {
	order := []byte(`{"order":{"id":"o-17","status":"PAID","n":42,"f":-1.5e3,"ok":true,"no":false,"nil":null,"obj":{},"arr":[1]},"id":"top"}`)
	tests := []struct {
		name   string
		fields []string
		max    int // 0 means 1024
		rec    Record
		want   string
		reason Reason
		offset int
	}{
		{name: "key", fields: []string{"key"}, rec: Record{Key: []byte("order-1")}, want: "order-1"},
		{name: "key binary", fields: []string{"key"}, rec: Record{Key: []byte{0, 0xff, '"', '\\'}}, want: "\x00\xff\"\\"},
		{name: "key nil", fields: []string{"key"}, rec: Record{Value: []byte("x")}, reason: FieldMissing},
		{name: "key empty", fields: []string{"key"}, rec: Record{Key: []byte{}}, reason: EmptyKey},
		{name: "header", fields: []string{"header:event-id"}, rec: Record{Headers: hdrs("trace", "t", "event-id", "e-1")}, want: "e-1"},
		{name: "header last wins", fields: []string{"header:event-id"}, rec: Record{Headers: hdrs("event-id", "first", "event-id", "last")}, want: "last"},
		{name: "header case sensitive", fields: []string{"header:event-id"}, rec: Record{Headers: hdrs("Event-Id", "e-1")}, reason: FieldMissing},
		{name: "header absent", fields: []string{"header:event-id"}, rec: Record{}, reason: FieldMissing},
		{name: "header null value", fields: []string{"header:event-id"}, rec: Record{Headers: []protocol.Header{{Key: "event-id"}}}, reason: FieldMissing},
		{name: "header empty value", fields: []string{"header:event-id"}, rec: Record{Headers: hdrs("event-id", "")}, reason: EmptyKey},
		{name: "json top", fields: []string{"json:id"}, rec: Record{Value: order}, want: "top"},
		{name: "json nested", fields: []string{"json:order.id"}, rec: Record{Value: order}, want: "o-17"},
		{name: "json number", fields: []string{"json:order.n"}, rec: Record{Value: order}, want: "42"},
		{name: "json float literal", fields: []string{"json:order.f"}, rec: Record{Value: order}, want: "-1.5e3"},
		{name: "json true", fields: []string{"json:order.ok"}, rec: Record{Value: order}, want: "true"},
		{name: "json false", fields: []string{"json:order.no"}, rec: Record{Value: order}, want: "false"},
		{name: "json null", fields: []string{"json:order.nil"}, rec: Record{Value: order}, reason: FieldMissing},
		{name: "json absent", fields: []string{"json:order.missing"}, rec: Record{Value: order}, reason: FieldMissing},
		{name: "json path through scalar", fields: []string{"json:order.id.x"}, rec: Record{Value: order}, reason: FieldMissing},
		{name: "json path through array", fields: []string{"json:order.arr.0"}, rec: Record{Value: order}, reason: FieldMissing},
		{name: "json object", fields: []string{"json:order.obj"}, rec: Record{Value: order}, reason: NotScalar},
		{name: "json array", fields: []string{"json:order.arr"}, rec: Record{Value: order}, reason: NotScalar},
		{name: "json whole object", fields: []string{"json:order"}, rec: Record{Value: order}, reason: NotScalar},
		{name: "json empty string", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":""}`)}, reason: EmptyKey},
		{name: "json top array", fields: []string{"json:id"}, rec: Record{Value: []byte(`[{"id":"x"}]`)}, reason: FieldMissing},
		{name: "json top string", fields: []string{"json:id"}, rec: Record{Value: []byte(`"id"`)}, reason: FieldMissing},
		{name: "json nil value", fields: []string{"json:id"}, rec: Record{}, reason: NotJSON},
		{name: "json whitespace only", fields: []string{"json:id"}, rec: Record{Value: []byte(" \n")}, reason: NotJSON, offset: 2},
		{name: "json truncated", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"x"`)}, reason: NotJSON, offset: 9},
		{name: "json garbage after", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"x"} x`)}, reason: NotJSON, offset: 11},
		{name: "json bad skipped value", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"x","y":[1,]}`)}, reason: NotJSON, offset: 17},
		{name: "json bad escape", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"\x"}`)}, reason: NotJSON, offset: 8},
		{name: "json text", fields: []string{"json:id"}, rec: Record{Value: []byte(`id=7`)}, reason: NotJSON},
		{name: "json escapes", fields: []string{"json:id"},
			rec:  Record{Value: []byte(`{"id":"a\"b\\c\/d\b\f\n\r\t\u00e9\u20AC\ud83d\ude00\u0000"}`)},
			want: "a\"b\\c/d\b\f\n\r\té€😀\x00"},
		{name: "json lone high surrogate", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"\ud83dx"}`)}, want: "\uFFFDx"},
		{name: "json lone low surrogate", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"\ude00\ud83d\ude00"}`)}, want: "\uFFFD😀"},
		{name: "json high high low", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"\ud83d\ud83d\ude00"}`)}, want: "\uFFFD😀"},
		{name: "json invalid utf8 kept", fields: []string{"json:id"}, rec: Record{Value: []byte("{\"id\":\"a\xffb\"}")}, want: "a\xffb"},
		{name: "json escaped name", fields: []string{"json:order.id"}, rec: Record{Value: []byte(`{"\u006frder":{"i\u0064":"x"}}`)}, want: "x"},
		{name: "json name with escaped quote", fields: []string{`json:a"b`}, rec: Record{Value: []byte(`{"a\"b":"x"}`)}, want: "x"},
		{name: "json unicode name", fields: []string{"json:😀"}, rec: Record{Value: []byte(`{"\ud83d\ude00":"x"}`)}, want: "x"},
		{name: "json name prefix is not a match", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"idx":"a","i":"b"}`)}, reason: FieldMissing},
		{name: "json duplicate last wins", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"a","id":"b"}`)}, want: "b"},
		{name: "json duplicate last null", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"id":"a","id":null}`)}, reason: FieldMissing},
		{name: "json duplicate parent last wins", fields: []string{"json:o.id"}, rec: Record{Value: []byte(`{"o":{"id":"a"},"o":{"x":1}}`)}, reason: FieldMissing},
		{name: "json duplicate parent scalar", fields: []string{"json:o.id"}, rec: Record{Value: []byte(`{"o":{"id":"a"},"o":1}`)}, reason: FieldMissing},
		{name: "json duplicate parent second", fields: []string{"json:o.id"}, rec: Record{Value: []byte(`{"o":1,"o":{"id":"b"}}`)}, want: "b"},
		{name: "json whitespace", fields: []string{"json:o.id"}, rec: Record{Value: []byte(" \t\r\n{ \"o\" :\n{\"id\"\t:\r 7 } }\n")}, want: "7"},
		{name: "json deep skip", fields: []string{"json:id"}, rec: Record{Value: []byte(`{"x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `,"id":"d"}`)}, want: "d"},
		{name: "composite", fields: []string{"json:order.id", "json:order.status"}, rec: Record{Value: order}, want: uv("o-17", "PAID")},
		{name: "composite mixed", fields: []string{"key", "header:h", "json:order.n"}, rec: Record{Key: []byte("k"), Value: order, Headers: hdrs("h", "hv")}, want: uv("k", "hv", "42")},
		{name: "composite escaped part", fields: []string{"key", "json:id"}, rec: Record{Key: []byte("k"), Value: []byte(`{"id":"\u00e9"}`)}, want: uv("k", "é")},
		{name: "composite missing second", fields: []string{"key", "header:h"}, rec: Record{Key: []byte("k")}, reason: FieldMissing},
		{name: "composite empty part", fields: []string{"key", "header:h"}, rec: Record{Key: []byte("k"), Headers: hdrs("h", "")}, reason: EmptyKey},
		{name: "too long single", fields: []string{"key"}, max: 3, rec: Record{Key: []byte("abcd")}, reason: KeyTooLong},
		{name: "exactly max single", fields: []string{"key"}, max: 4, rec: Record{Key: []byte("abcd")}, want: "abcd"},
		{name: "too long escaped", fields: []string{"json:id"}, max: 2, rec: Record{Value: []byte(`{"id":"\u00e9\u00e9"}`)}, reason: KeyTooLong},
		{name: "escaped within max", fields: []string{"json:id"}, max: 4, rec: Record{Value: []byte(`{"id":"\u00e9\u00e9"}`)}, want: "éé"},
		{name: "too long composite counts prefixes", fields: []string{"key", "header:h"}, max: 5, rec: Record{Key: []byte("ab"), Headers: hdrs("h", "cd")}, reason: KeyTooLong},
		{name: "exactly max composite", fields: []string{"key", "header:h"}, max: 6, rec: Record{Key: []byte("ab"), Headers: hdrs("h", "cd")}, want: uv("ab", "cd")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			max := tt.max
			if max == 0 {
				max = 1024
			}
			e := mustExtractor(t, max, tt.fields...)
			prefix := []byte("prefix")
			got, err := e.Extract(prefix, &tt.rec)
			if tt.reason == 0 {
				if err != nil {
					t.Fatalf("Extract: %v", err)
				}
				if want := "prefix" + tt.want; string(got) != want {
					t.Fatalf("Extract = %q, want %q", got, want)
				}
				return
			}
			var ke *KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("Extract = %q, %v; want a *KeyError %s", got, err, tt.reason)
			}
			if ke.Reason != tt.reason {
				t.Fatalf("reason = %s, want %s (%v)", ke.Reason, tt.reason, err)
			}
			if tt.offset != 0 && ke.Offset != tt.offset {
				t.Fatalf("offset = %d, want %d (%v)", ke.Offset, tt.offset, err)
			}
			if string(got) != "prefix" {
				t.Fatalf("on failure Extract returned %q, want dst unchanged", got)
			}
			if !strings.HasPrefix(err.Error(), "partition: key field ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestKeyErrorFields(t *testing.T) {
	e := mustExtractor(t, 4, "key", "json:o.id")
	_, err := e.Extract(nil, &Record{Key: []byte("k"), Value: []byte(`{"o":{"id":"long"}}`)})
	var ke *KeyError
	if !errors.As(err, &ke) {
		t.Fatal(err)
	}
	want := KeyError{Reason: KeyTooLong, Field: "json:o.id", Size: 7, Max: 4}
	if *ke != want {
		t.Fatalf("KeyError = %+v, want %+v", *ke, want)
	}
	if got := err.Error(); got != "partition: key field json:o.id: key_too_long (7 bytes, max 4)" {
		t.Fatalf("Error() = %q", got)
	}

	_, err = e.Extract(nil, &Record{Key: []byte("k"), Value: []byte(`{"o":}`)})
	if got := err.Error(); got != "partition: key field json:o.id: not_json (at byte 5)" {
		t.Fatalf("Error() = %q", got)
	}
	if r, ok := ReasonOf(fmt.Errorf("partition 3: %w", err)); !ok || r != NotJSON {
		t.Fatalf("ReasonOf(wrapped) = %v, %v", r, ok)
	}
	if _, ok := ReasonOf(errors.New("other")); ok {
		t.Fatal("ReasonOf(other error) reported a reason")
	}
}

func TestReasonString(t *testing.T) {
	want := map[Reason]string{
		NotJSON:      "not_json",
		FieldMissing: "field_missing",
		NotScalar:    "not_scalar",
		KeyTooLong:   "key_too_long",
		EmptyKey:     "empty_key",
		BadVersion:   "bad_version",
		0:            "unknown",
		200:          "unknown",
	}
	for r, s := range want {
		if got := r.String(); got != s {
			t.Errorf("Reason(%d).String() = %q, want %q", int(r), got, s)
		}
	}
}

func TestExtractUint(t *testing.T) {
	doc := []byte(`{"v":42,"big":18446744073709551615,"over":18446744073709551616,"neg":-1,"frac":1.0,"exp":1e3,` +
		`"s":"17","esc":"\u0031\u0032","sneg":"-1","sempty":"","sspace":" 1","long":"000000000000000000001",` +
		`"t":true,"n":null,"o":{"v":7},"a":[1]}`)
	tests := []struct {
		field  string
		rec    Record
		want   uint64
		reason Reason
	}{
		{field: "json:v", want: 42},
		{field: "json:o.v", want: 7},
		{field: "json:big", want: 1<<64 - 1},
		{field: "json:s", want: 17},
		{field: "json:esc", want: 12},
		{field: "json:over", reason: BadVersion},
		{field: "json:neg", reason: BadVersion},
		{field: "json:frac", reason: BadVersion},
		{field: "json:exp", reason: BadVersion},
		{field: "json:sneg", reason: BadVersion},
		{field: "json:sempty", reason: BadVersion},
		{field: "json:sspace", reason: BadVersion},
		{field: "json:long", reason: BadVersion},
		{field: "json:t", reason: BadVersion},
		{field: "json:n", reason: FieldMissing},
		{field: "json:x", reason: FieldMissing},
		{field: "json:o", reason: NotScalar},
		{field: "json:a", reason: NotScalar},
		{field: "json:v", rec: Record{Value: []byte(`{"v":1`)}, reason: NotJSON},
		{field: "header:ver", rec: Record{Headers: hdrs("ver", "0009")}, want: 9},
		{field: "header:ver", rec: Record{Headers: hdrs("ver", "9x")}, reason: BadVersion},
		{field: "header:ver", rec: Record{Headers: hdrs("ver", "")}, reason: BadVersion},
		{field: "header:ver", rec: Record{}, reason: FieldMissing},
		{field: "key", rec: Record{Key: []byte("123")}, want: 123},
		{field: "key", rec: Record{}, reason: FieldMissing},
	}
	for _, tt := range tests {
		t.Run(tt.field+"/"+string(tt.rec.Value)+string(tt.rec.Key), func(t *testing.T) {
			f, err := ParseField(tt.field)
			if err != nil {
				t.Fatal(err)
			}
			rec := tt.rec
			if rec.Value == nil && rec.Key == nil && rec.Headers == nil && f.Source == SourceJSON {
				rec.Value = doc
			}
			got, err := ExtractUint(&rec, f)
			if tt.reason != 0 {
				if r, ok := ReasonOf(err); !ok || r != tt.reason {
					t.Fatalf("ExtractUint = %d, %v; want reason %s", got, err, tt.reason)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ExtractUint = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
	if _, err := ExtractUint(&Record{}, Field{Source: SourceJSON}); err == nil || !strings.HasPrefix(err.Error(), "partition: ") {
		t.Fatalf("invalid field: err = %v", err)
	}
}

// decodeComposite is the test's own reader of the composite encoding; a
// successful decode of every encoding proves the encoding injective.
func decodeComposite(key []byte) ([][]byte, bool) {
	var parts [][]byte
	for len(key) > 0 {
		n, w := binary.Uvarint(key)
		if w <= 0 || uint64(len(key)-w) < n {
			return nil, false
		}
		parts = append(parts, key[w:w+int(n)])
		key = key[w+int(n):]
	}
	return parts, true
}

func TestEncodeKeyLongPart(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 300) // a two-byte uvarint prefix
	got := EncodeKey(nil, []byte("a"), long)
	want := append([]byte{1, 'a', 0xac, 0x02}, long...)
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeKey = %x..., want %x...", got[:6], want[:6])
	}
	e := mustExtractor(t, 1024, "key", "header:h")
	ex, err := e.Extract(nil, &Record{Key: []byte("a"), Headers: []protocol.Header{{Key: "h", Value: long}}})
	if err != nil || !bytes.Equal(ex, want) {
		t.Fatalf("Extract = %x..., %v", ex[:6], err)
	}
	if got := EncodeKey([]byte("p"), []byte("single")); string(got) != "psingle" {
		t.Fatalf("EncodeKey(one part) = %q", got)
	}
}

func TestExtractDoesNotAllocate(t *testing.T) {
	value := []byte(`{"meta":{"source":"web","v":3},"order":{"id":"o-\u00e9-1","status":"PAID"},"amount":12.5}`)
	rec := &Record{Key: []byte("order-1"), Value: value, Headers: hdrs("trace", "t", "event-id", "e-1")}
	cases := map[string]*Extractor{
		"key":       mustExtractor(t, 1024, "key"),
		"header":    mustExtractor(t, 1024, "header:event-id"),
		"json":      mustExtractor(t, 1024, "json:order.id"),
		"composite": mustExtractor(t, 1024, "json:order.id", "json:order.status", "header:event-id"),
	}
	dst := make([]byte, 0, 256)
	for name, e := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := e.Extract(dst, rec); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(200, func() {
				dst, _ = e.Extract(dst[:0], rec)
			}); n != 0 {
				t.Fatalf("Extract allocates %.1f times per call, want 0", n)
			}
		})
	}
	t.Run("uint", func(t *testing.T) {
		f := Field{Source: SourceJSON, Name: "meta.v"}
		if n := testing.AllocsPerRun(200, func() { _, _ = ExtractUint(rec, f) }); n != 0 {
			t.Fatalf("ExtractUint allocates %.1f times per call, want 0", n)
		}
	})
	t.Run("error path", func(t *testing.T) {
		e := mustExtractor(t, 1024, "json:order.missing")
		if n := testing.AllocsPerRun(200, func() { dst, _ = e.Extract(dst[:0], rec) }); n != 1 {
			t.Fatalf("failing Extract allocates %.1f times per call, want 1 (the *KeyError)", n)
		}
	})
}
