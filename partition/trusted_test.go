package partition

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzExtractTrusted checks the restore's fast path: it never panics, and
// on every text encoding/json accepts it returns exactly what Extract
// returns (key bytes and failure reason) and, on valid UTF-8, what
// encoding/json finds (oracleLookup). Seeds: FuzzExtractJSON's corpus
// shapes, in testdata/fuzz/FuzzExtractTrusted, and the table of
// TestExtractTrusted.
func FuzzExtractTrusted(f *testing.F) {
	for _, c := range trustedCases {
		f.Add([]byte(c), "a")
	}
	f.Fuzz(func(t *testing.T, doc []byte, path string) {
		if _, err := ParseField("json:" + path); err != nil {
			return
		}
		checkTrusted(t, doc, path)
	})
}

var trustedCases = []string{
	`{"a":"x"}`, ` { "a" : "x" } `, `{"b":1,"a":"x"}`, `{"a":"x","a":"y"}`, `{"a":"x","a":null}`, `{"a":"x","a":{}}`,
	`{"a":1.5e3}`, `{"a":-0}`, `{"a":true}`, `{"a":false}`, `{"a":null}`, `{"a":[1,"]",{"a":"}"}]}`, `{"a":{"a":"z"}}`,
	`{"b":{"a":"z"},"a":"x"}`, `{"b":"\"a\":\"z\"","a":"x"}`, `{"b":"\\","a":"x"}`, `{"b":"\\\"","a":"x"}`,
	`{"\u0061":"x"}`, `{"a\\":"x","a":"y"}`, `{"a":"\u00e9\n\"q\""}`, `{"a":"x\\"}`, `{}`, `{ }`, `[]`, `"a"`, `1`,
	`{"a":"x"} x`, `{"a":"x"`, `{"a":}`, `{"a" "x"}`, `{"a":"x",}`, `{"a":tru}`, `{"a":01}`, `{"a":"\q"}`,
	"{\"a\":\"\x01\"}", `{"a":"x"}}`, `{"a":[}`, `{"b":[1,2,"a"],"a":"x"}`, "{\"a\":\"\xff\"}",
	// After the member, the rest is searched, not scanned (noLaterMember):
	// a later member written with an escape, the name quoted in a nested
	// object or a value, the name unquoted.
	`{"a":"x","\u0061":"y"}`, `{"a":"x","b":{"a":"y"}}`, `{"a":"x","b":"a","c":1}`, `{"a":"x","ab":"a"}`,
	`{"a":"x","b":["a"],"a":"z"}`, `{"a":1,"b":"\"a\""}`,
	// The first member's plain string taken in place (firstPlainString):
	// an empty one, a name that only starts like the one sought, a value
	// with an escape, a later member of the name, a key before spaces.
	`{"a":"","b":1}`, `{"ab":"x","a":"y"}`, `{"a":"x\"y","b":2}`, `{"a":"x","b":2,"a":"y"}`, `{"a":"x" ,"b":"a"}`,
}

func TestExtractTrusted(t *testing.T) {
	for _, c := range trustedCases {
		for _, path := range []string{"a", "b", "a.b"} {
			checkTrusted(t, []byte(c), path)
		}
	}
}

// checkTrusted compares ExtractTrusted with Extract and encoding/json on
// doc, when doc is valid JSON.
func checkTrusted(t fataler, doc []byte, path string) {
	t.Helper()
	e, err := NewExtractor([]Field{{Source: SourceJSON, Name: path}}, 1<<30)
	if err != nil {
		t.Fatalf("NewExtractor(%q): %v", path, err)
	}
	r := &Record{Value: doc}
	got, gerr := e.ExtractTrusted(nil, r)
	if !json.Valid(doc) {
		return // any key or error: it never panics
	}
	want, werr := e.Extract(nil, r)
	gr, _ := ReasonOf(gerr)
	wr, _ := ReasonOf(werr)
	if string(got) != string(want) || gr != wr || (gerr == nil) != (werr == nil) {
		t.Fatalf("doc %q path %q:\nExtractTrusted = %q, %v\nExtract        = %q, %v", doc, path, got, gerr, want, werr)
	}
	if !utf8.Valid(doc) {
		return
	}
	if ow, or := oracleLookup(doc, path); string(got) != ow || gr != or {
		t.Fatalf("doc %q path %q:\nExtractTrusted = %q, %v\nencoding/json  = %q, %v", doc, path, got, gr, ow, or)
	}
}

// TestExtractTrustedShortcut pins ExtractTrusted's shortcut for one plain
// top-level member (Extractor.plain) to Extract's result: the key, its
// length limit, and the names the shortcut must leave to the scan (a path,
// a name with a quote or a backslash).
func TestExtractTrustedShortcut(t *testing.T) {
	cases := []struct {
		field, doc string
		maxKeyLen  int
	}{
		{"order_id", `{"order_id":"o-1","msg_id":"m-1","amount":1}`, 64},
		{"order_id", `{"order_id":"o-1234","amount":1}`, 6},     // at the limit
		{"order_id", `{"order_id":"o-12345","amount":1}`, 6},    // one byte over it
		{"order_id", `{"order_id":"o-1","order_id":"o-2"}`, 64}, // a later member wins
		{"a.b", `{"a.b":"x","a":{"b":"y"}}`, 64},                // a path, not a name
		{"a.b", `{"a.b":"x"}`, 64},
		{`a"b`, `{"a\"b":"x"}`, 64},
		{`a\b`, `{"a\\b":"x"}`, 64},
	}
	for _, c := range cases {
		t.Run(c.field+"/"+c.doc, func(t *testing.T) {
			e, err := NewExtractor([]Field{{Source: SourceJSON, Name: c.field}}, c.maxKeyLen)
			if err != nil {
				t.Fatal(err)
			}
			r := &Record{Value: []byte(c.doc)}
			got, gerr := e.ExtractTrusted([]byte("p:"), r)
			want, werr := e.Extract([]byte("p:"), r)
			gr, _ := ReasonOf(gerr)
			wr, _ := ReasonOf(werr)
			if string(got) != string(want) || gr != wr || (gerr == nil) != (werr == nil) {
				t.Fatalf("ExtractTrusted = %q, %v; Extract = %q, %v", got, gerr, want, werr)
			}
		})
	}
}
