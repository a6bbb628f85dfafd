package partition

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go/protocol"
)

// FuzzExtractJSON checks the JSON scanner against encoding/json: it never
// panics, rejects exactly the texts json.Valid rejects, and on valid UTF-8
// texts finds the same value (or the same reason for finding none). Seeds
// live in testdata/fuzz/FuzzExtractJSON.
func FuzzExtractJSON(f *testing.F) {
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		if _, err := ParseField("json:" + path); err != nil {
			return
		}
		checkJSONAgainstOracle(t, doc, path)
	})
}

// FuzzParseField checks that ParseField never panics, that what it accepts
// prints back unchanged and builds an Extractor, and that its errors carry
// the package prefix.
func FuzzParseField(f *testing.F) {
	rec := &Record{Key: []byte("k"), Value: []byte(`{"a":{"b":"c"}}`), Headers: []protocol.Header{{Key: "a", Value: []byte("h")}}}
	f.Fuzz(func(t *testing.T, s string) {
		field, err := ParseField(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "partition: ") {
				t.Fatalf("ParseField(%q) error %q lacks the package prefix", s, err)
			}
			return
		}
		if got := field.String(); got != s {
			t.Fatalf("ParseField(%q).String() = %q", s, got)
		}
		e, err := NewExtractor([]Field{field, {Source: SourceKey}}, 64)
		if field.Source == SourceKey {
			if err == nil {
				t.Fatal("NewExtractor accepted the same field twice")
			}
			return
		}
		if err != nil {
			t.Fatalf("NewExtractor(%+v): %v", field, err)
		}
		if _, err := e.Extract(nil, rec); err != nil {
			if _, ok := ReasonOf(err); !ok {
				t.Fatalf("Extract returned a non-KeyError: %v", err)
			}
		}
	})
}

// FuzzExtractUint checks version parsing against strconv.ParseUint, for
// header text and for a JSON member.
func FuzzExtractUint(f *testing.F) {
	f.Fuzz(func(t *testing.T, text []byte) {
		want, perr := strconv.ParseUint(string(text), 10, 64)
		wantOK := perr == nil && len(text) <= 20
		got, err := ExtractUint(&Record{Headers: []protocol.Header{{Key: "v", Value: text}}}, Field{Source: SourceHeader, Name: "v"})
		if (err == nil) != wantOK || (wantOK && got != want) {
			t.Fatalf("header %q: ExtractUint = %d, %v; strconv = %d, %v", text, got, err, want, perr)
		}

		doc := append(append([]byte(`{"v":`), text...), '}')
		got, err = ExtractUint(&Record{Value: doc}, Field{Source: SourceJSON, Name: "v"})
		var num any
		dec := json.NewDecoder(strings.NewReader(string(doc)))
		dec.UseNumber()
		valid := json.Valid(doc) && dec.Decode(&num) == nil
		if r, _ := ReasonOf(err); (r == NotJSON) != !valid {
			t.Fatalf("doc %q: ExtractUint reason %v, json.Valid %v", doc, r, valid)
		}
		if !valid {
			return
		}
		var wantJSON uint64
		okJSON := false
		switch v := num.(map[string]any)["v"].(type) {
		case json.Number:
			wantJSON, perr = strconv.ParseUint(string(v), 10, 64)
			okJSON = perr == nil
		case string:
			wantJSON, perr = strconv.ParseUint(v, 10, 64)
			okJSON = perr == nil && len(v) <= 20
		}
		if (err == nil) != okJSON || (okJSON && got != wantJSON) {
			t.Fatalf("doc %q: ExtractUint = %d, %v; want %d (ok %v)", doc, got, err, wantJSON, okJSON)
		}
	})
}
