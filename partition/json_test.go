package partition

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/segmentio/kafka-go/protocol"
	"pgregory.net/rapid"
)

// oracleLookup is the reference for a JSON field: encoding/json decodes the
// whole text and the path is walked over the decoded maps.
func oracleLookup(doc []byte, path string) (string, Reason) {
	if !json.Valid(doc) {
		return "", NotJSON
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic(fmt.Sprintf("Valid but Decode failed: %v", err))
	}
	for _, name := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return "", FieldMissing
		}
		if v, ok = m[name]; !ok {
			return "", FieldMissing
		}
	}
	switch x := v.(type) {
	case nil:
		return "", FieldMissing
	case string:
		if x == "" {
			return "", EmptyKey
		}
		return x, 0
	case json.Number:
		return string(x), 0
	case bool:
		return strconv.FormatBool(x), 0
	default:
		return "", NotScalar
	}
}

// checkJSONAgainstOracle extracts path from doc and compares with
// encoding/json. Validity must always agree; values are compared when doc is
// valid UTF-8 (encoding/json replaces invalid bytes, Extract keeps them).
func checkJSONAgainstOracle(t fataler, doc []byte, path string) {
	t.Helper()
	e, err := NewExtractor([]Field{{Source: SourceJSON, Name: path}}, 1<<30)
	if err != nil {
		t.Fatalf("NewExtractor(%q): %v", path, err)
	}
	got, err := e.Extract(nil, &Record{Value: doc})
	var reason Reason
	if err != nil {
		var ok bool
		if reason, ok = ReasonOf(err); !ok {
			t.Fatalf("Extract returned a non-KeyError: %v", err)
		}
	}
	want, wantReason := oracleLookup(doc, path)
	if (reason == NotJSON) != (wantReason == NotJSON) {
		t.Fatalf("doc %q path %q: Extract reason %v (%v), encoding/json.Valid = %v", doc, path, reason, err, wantReason != NotJSON)
	}
	if !utf8.Valid(doc) {
		return
	}
	if reason != wantReason || string(got) != want {
		t.Fatalf("doc %q path %q:\nExtract  = %q, %v\noracle   = %q, %v", doc, path, got, reason, want, wantReason)
	}
}

func TestJSONValidityMatchesEncodingJSON(t *testing.T) {
	docs := []string{
		``, ` `, `{`, `}`, `{}`, `{ }`, `[]`, `[ ]`, `[`, `]`, `""`, `"`, `"\"`, `0`, `-0`, `-`, `01`, `1.`, `.1`, `1.5`,
		`1e`, `1e+`, `1e+5`, `1E-05`, `-1.0e10`, `+1`, `1e5.5`, `0x10`, `Infinity`, `NaN`, `true`, `tru`, `truex`, `false`,
		`null`, `nul`, `True`, `{"a":1}`, `{"a" : 1 }`, `{"a":1,}`, `{,"a":1}`, `{"a":1,,"b":2}`, `{"a"}`, `{"a":}`,
		`{"a" 1}`, `{a:1}`, `{'a':1}`, `{"a":1}}`, `{"a":1]`, `[1,2]`, `[1,]`, `[,1]`, `[1 2]`, `[1,2}`, `{"a":[1,{"b":[]}]}`,
		`{"a":{"b":{"c":[[[]]]}}}`, `{"a":"\u00e9"}`, `{"a":"\u00e"}`, `{"a":"\u00eg"}`, `{"a":"\ud800"}`, `{"a":"\q"}`,
		"{\"a\":\"\t\"}", "{\"a\":\"\x1f\"}", "{\"a\":\"\x00\"}", "{\"a\":\"\n\"}", "{\"\x1f\":1}", "[\"\x1f\"]", "{\"a\":\"\x7f\"}", "{\"a\":\"\xff\"}", "{\"\xff\":1}", "\xef\xbb\xbf{}", "{}\x00", "\v{}", "{}\f",
		"\u00a0{}", `{"a":1} {"b":2}`, `{"a":1}` + "\n", `1 2`, `[1] x`, `{"a":[1,2],"b":{"c":null,"d":[true,false]}}`,
	}
	for _, d := range docs {
		for _, path := range []string{"a", "a.b", "b.c", "x"} {
			t.Run(fmt.Sprintf("%q/%s", d, path), func(t *testing.T) {
				checkJSONAgainstOracle(t, []byte(d), path)
			})
		}
	}
}

func TestJSONMaxDepth(t *testing.T) {
	// encoding/json accepts 10000 nested containers and rejects 10001.
	for _, depth := range []int{63, 64, 65, 129, 9999, 10000, 10001} {
		for _, open := range []string{"[", `{"a":`} {
			var b strings.Builder
			// The top-level object is one level; nest depth-1 more inside it.
			b.WriteString(`{"x":`)
			for range depth - 1 {
				b.WriteString(open)
			}
			b.WriteString("1")
			for range depth - 1 {
				if open == "[" {
					b.WriteString("]")
				} else {
					b.WriteString("}")
				}
			}
			b.WriteString(`,"id":"v"}`)
			doc := []byte(b.String())
			t.Run(fmt.Sprintf("%s%d", open[:1], depth), func(t *testing.T) {
				checkJSONAgainstOracle(t, doc, "id")
				checkJSONAgainstOracle(t, doc, "x")
			})
		}
	}
	// Depth along the walked path counts too.
	for _, depth := range []int{10000, 10001} {
		doc := strings.Repeat(`{"a":`, depth) + `"v"` + strings.Repeat("}", depth)
		path := strings.TrimSuffix(strings.Repeat("a.", depth), ".")
		t.Run(fmt.Sprintf("path%d", depth), func(t *testing.T) {
			checkJSONAgainstOracle(t, []byte(doc), path)
		})
	}
}

// A generated JSON tree: objects keep member order and may repeat names,
// which map[string]any cannot express.
type jNode struct {
	kind    byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	str     string
	members []jMember
	elems   []jNode
}

type jMember struct {
	name string
	val  jNode
}

// Names come from a small set so that random paths often exist; they
// include characters that need escaping and non-ASCII runes.
var jNames = []string{"a", "b", "id", "order", "é", "😀", `q"`, `s\`, "tab\t", "a b", "\u2028", "nul\x00"}

func genRuneString(t *rapid.T, label string) string {
	r := rapid.OneOf(
		rapid.RuneFrom([]rune("abcxyz019 _-")),
		rapid.RuneFrom([]rune{'"', '\\', '/', '\b', '\f', '\n', '\r', '\t', 0, 0x1f, 0x7f, 0x2028, 0xfffd, 0xffff}),
		rapid.Map(rapid.Int32Range(0x80, 0x10ffff), func(r int32) rune {
			if 0xd800 <= r && r <= 0xdfff {
				r += 0x800 // surrogates are not runes
			}
			return r
		}),
	)
	return string(rapid.SliceOfN(r, 0, 12).Draw(t, label))
}

func genNumber(t *rapid.T) string {
	var b strings.Builder
	if rapid.Bool().Draw(t, "neg") {
		b.WriteByte('-')
	}
	if rapid.IntRange(0, 3).Draw(t, "zero") == 0 {
		b.WriteByte('0')
	} else {
		b.WriteString(strconv.FormatUint(rapid.Uint64Range(1, 1<<63).Draw(t, "int"), 10))
	}
	if rapid.Bool().Draw(t, "frac") {
		b.WriteString("." + rapid.StringMatching(`[0-9]{1,4}`).Draw(t, "fracdigits"))
	}
	if rapid.Bool().Draw(t, "exp") {
		b.WriteString(rapid.SampledFrom([]string{"e", "E", "e+", "E-"}).Draw(t, "e"))
		b.WriteString(rapid.StringMatching(`[0-9]{1,3}`).Draw(t, "expdigits"))
	}
	return b.String()
}

func genNode(t *rapid.T, depth int) jNode {
	kinds := []byte("snbzoa")
	if depth >= 4 {
		kinds = kinds[:4]
	}
	switch k := rapid.SampledFrom(kinds).Draw(t, "kind"); k {
	case 's':
		return jNode{kind: k, str: genRuneString(t, "str")}
	case 'n':
		return jNode{kind: k, str: genNumber(t)}
	case 'b':
		return jNode{kind: k, str: strconv.FormatBool(rapid.Bool().Draw(t, "bool"))}
	case 'z':
		return jNode{kind: k}
	case 'o':
		n := rapid.IntRange(0, 5).Draw(t, "members")
		var ms []jMember
		for range n {
			ms = append(ms, jMember{name: rapid.SampledFrom(jNames).Draw(t, "name"), val: genNode(t, depth+1)})
		}
		return jNode{kind: k, members: ms}
	default:
		n := rapid.IntRange(0, 3).Draw(t, "elems")
		var es []jNode
		for range n {
			es = append(es, genNode(t, depth+1))
		}
		return jNode{kind: k, elems: es}
	}
}

// toAny converts n into what encoding/json decodes it to (last duplicate
// wins), so that encoding/json can render it.
func (n jNode) toAny() any {
	switch n.kind {
	case 's':
		return n.str
	case 'n':
		return json.Number(n.str)
	case 'b':
		return n.str == "true"
	case 'z':
		return nil
	case 'o':
		m := map[string]any{}
		for _, mb := range n.members {
			m[mb.name] = mb.val.toAny()
		}
		return m
	default:
		a := []any{}
		for _, e := range n.elems {
			a = append(a, e.toAny())
		}
		return a
	}
}

// lookup is the model's answer for path: the expected key text and reason.
func (n jNode) lookup(path string) (string, Reason) {
	cur := n
	for _, name := range strings.Split(path, ".") {
		if cur.kind != 'o' {
			return "", FieldMissing
		}
		found := false
		for _, m := range cur.members {
			if m.name == name {
				cur, found = m.val, true // keep going: the last one wins
			}
		}
		if !found {
			return "", FieldMissing
		}
	}
	switch cur.kind {
	case 'z':
		return "", FieldMissing
	case 'o', 'a':
		return "", NotScalar
	case 's':
		if cur.str == "" {
			return "", EmptyKey
		}
	}
	return cur.str, 0
}

// writer renders a tree with randomly chosen, all valid, spellings: optional
// whitespace and every kind of string escape, including surrogate pairs.
type writer struct {
	t *rapid.T
	b bytes.Buffer
}

func (w *writer) space() {
	if rapid.IntRange(0, 3).Draw(w.t, "ws?") == 0 {
		w.b.WriteString(rapid.StringMatching(`[ \t\r\n]{1,3}`).Draw(w.t, "ws"))
	}
}

func (w *writer) str(s string) {
	w.b.WriteByte('"')
	for _, r := range s {
		mode := rapid.IntRange(0, 3).Draw(w.t, "esc")
		switch {
		case mode == 1 && r <= 0xffff:
			fmt.Fprintf(&w.b, `\u%04x`, r)
		case mode == 1:
			r -= 0x10000
			fmt.Fprintf(&w.b, `\u%04X\u%04X`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		case mode == 2 && strings.ContainsRune("\"\\/\b\f\n\r\t", r):
			w.b.WriteString(map[rune]string{'"': `\"`, '\\': `\\`, '/': `\/`, '\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}[r])
		case r < 0x20:
			fmt.Fprintf(&w.b, `\u%04x`, r)
		case r == '"' || r == '\\':
			w.b.WriteByte('\\')
			w.b.WriteRune(r)
		default:
			w.b.WriteRune(r)
		}
	}
	w.b.WriteByte('"')
}

func (w *writer) node(n jNode) {
	w.space()
	switch n.kind {
	case 's':
		w.str(n.str)
	case 'n', 'b':
		w.b.WriteString(n.str)
	case 'z':
		w.b.WriteString("null")
	case 'o':
		w.b.WriteByte('{')
		for i, m := range n.members {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.space()
			w.str(m.name)
			w.space()
			w.b.WriteByte(':')
			w.node(m.val)
		}
		w.space()
		w.b.WriteByte('}')
	default:
		w.b.WriteByte('[')
		for i, e := range n.elems {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.node(e)
		}
		w.space()
		w.b.WriteByte(']')
	}
	w.space()
}

// genPath returns, most of the time, a path that exists in root (found by
// walking the tree), and otherwise a random one.
func genPath(t *rapid.T, root jNode) string {
	var existing []string
	var walk func(n jNode, prefix string)
	walk = func(n jNode, prefix string) {
		for _, m := range n.members {
			p := prefix + m.name
			existing = append(existing, p)
			walk(m.val, p+".")
		}
	}
	walk(root, "")
	if len(existing) > 0 && rapid.IntRange(0, 3).Draw(t, "existing") > 0 {
		return rapid.SampledFrom(existing).Draw(t, "path")
	}
	names := rapid.SliceOfN(rapid.SampledFrom(jNames), 1, 3).Draw(t, "names")
	return strings.Join(names, ".")
}

func extractJSON(t *rapid.T, doc []byte, path string) (string, Reason) {
	e, err := NewExtractor([]Field{{Source: SourceJSON, Name: path}}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Extract(nil, &Record{Value: doc})
	if err != nil {
		r, ok := ReasonOf(err)
		if !ok {
			t.Fatalf("non-KeyError %v", err)
		}
		return "", r
	}
	return string(got), 0
}

// TestPropertyJSONAgainstEncodingJSON builds random nested objects, renders
// them with encoding/json and with the randomised writer (escapes,
// whitespace, repeated names), and checks Extract against both the tree and
// encoding/json's decode.
func TestPropertyJSONAgainstEncodingJSON(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		root := genNode(t, 0)
		if rapid.IntRange(0, 9).Draw(t, "toplevel") > 0 {
			for root.kind != 'o' {
				root = jNode{kind: 'o', members: []jMember{{name: rapid.SampledFrom(jNames).Draw(t, "name"), val: root}}}
			}
		}
		var paths []string
		for range 4 {
			paths = append(paths, genPath(t, root))
		}

		var docs [][]byte
		std, err := json.Marshal(root.toAny())
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, std)
		var noHTML bytes.Buffer
		enc := json.NewEncoder(&noHTML)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(root.toAny()); err != nil {
			t.Fatal(err)
		}
		docs = append(docs, noHTML.Bytes())
		w := &writer{t: t}
		w.node(root)
		docs = append(docs, w.b.Bytes())

		for _, doc := range docs {
			for _, path := range paths {
				want, wantReason := root.lookup(path)
				got, reason := extractJSON(t, doc, path)
				if got != want || reason != wantReason {
					t.Fatalf("doc %s\npath %q\nExtract = %q, %v\nmodel   = %q, %v", doc, path, got, reason, want, wantReason)
				}
				if oWant, oReason := oracleLookup(doc, path); oWant != want || oReason != wantReason {
					t.Fatalf("test generator disagrees with encoding/json on doc %s path %q: %q %v vs %q %v", doc, path, want, wantReason, oWant, oReason)
				}
			}
		}
	})
}

// TestPropertyJSONMutations damages valid texts one byte at a time:
// Extract must reject exactly what encoding/json rejects.
func TestPropertyJSONMutations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		root := genNode(t, 1)
		w := &writer{t: t}
		w.node(root)
		mutated := bytes.Clone(w.b.Bytes())
		for range rapid.IntRange(1, 3).Draw(t, "mutations") {
			i := rapid.IntRange(0, len(mutated)).Draw(t, "at")
			c := rapid.SampledFrom([]byte(`{}[]":,\ u0e.-+tfn`+"\x00\x1f\xff")).Draw(t, "byte")
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				mutated = append(mutated[:i], append([]byte{c}, mutated[i:]...)...)
			case 1:
				if i < len(mutated) {
					mutated = append(mutated[:i], mutated[i+1:]...)
				}
			default:
				mutated = mutated[:i]
			}
		}
		path := genPath(t, root)
		want, wantReason := oracleLookup(mutated, path)
		got, reason := extractJSON(t, mutated, path)
		if (reason == NotJSON) != (wantReason == NotJSON) {
			t.Fatalf("doc %q path %q: Extract reason %v, encoding/json %v", mutated, path, reason, wantReason)
		}
		if utf8.Valid(mutated) && (got != want || reason != wantReason) {
			t.Fatalf("doc %q path %q: Extract = %q %v, encoding/json = %q %v", mutated, path, got, reason, want, wantReason)
		}
	})
}

// TestPropertyCompositeInjective checks that different part lists give
// different keys: the test's own decoder recovers the parts from every
// encoding, and moving a boundary between two parts changes the key.
func TestPropertyCompositeInjective(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(2, 4).Draw(t, "n")
		parts := make([][]byte, n)
		specs := make([]string, n)
		var rec Record
		for i := range parts {
			// Up to 300 bytes so that some prefixes take two bytes.
			parts[i] = rapid.SliceOfN(rapid.Byte(), 1, 300).Draw(t, "part")
			specs[i] = fmt.Sprintf("header:h%d", i)
			rec.Headers = append(rec.Headers, protocol.Header{Key: fmt.Sprintf("h%d", i), Value: parts[i]})
		}
		e := mustExtractor(t, 1<<20, specs...)
		key, err := e.Extract(nil, &rec)
		if err != nil {
			t.Fatal(err)
		}
		decoded, ok := decodeComposite(key)
		if !ok || len(decoded) != n {
			t.Fatalf("cannot decode %x into %d parts", key, n)
		}
		for i := range parts {
			if !bytes.Equal(decoded[i], parts[i]) {
				t.Fatalf("part %d decoded as %x, want %x", i, decoded[i], parts[i])
			}
		}
		if enc := EncodeKey(nil, parts...); !bytes.Equal(enc, key) {
			t.Fatalf("EncodeKey = %x, Extract = %x", enc, key)
		}

		// Shift the boundary between parts i and i+1: same concatenated
		// bytes, different parts, so the key must differ.
		i := rapid.IntRange(0, n-2).Draw(t, "boundary")
		shifted := make([][]byte, n)
		copy(shifted, parts)
		joined := append(bytes.Clone(parts[i]), parts[i+1]...)
		cut := rapid.IntRange(1, len(joined)-1).Draw(t, "cut")
		shifted[i], shifted[i+1] = joined[:cut], joined[cut:]
		same := bytes.Equal(shifted[i], parts[i])
		if k2 := EncodeKey(nil, shifted...); bytes.Equal(k2, key) != same {
			t.Fatalf("parts %x and %x: keys equal = %v", parts, shifted, !same)
		}
	})
}

func TestPropertyCompositeDistinctTuples(t *testing.T) {
	// Small alphabets make equal concatenations with different splits
	// common; the encoding must separate all of them.
	seen := map[string]string{}
	alphabet := []string{"a", "b", "ab", "ba", "aa", "\x01", "\x01a", "a\x01"}
	for _, x := range alphabet {
		for _, y := range alphabet {
			for _, z := range alphabet {
				tuple := strconv.Quote(x) + "," + strconv.Quote(y) + "," + strconv.Quote(z)
				k := string(EncodeKey(nil, []byte(x), []byte(y), []byte(z)))
				if prev, ok := seen[k]; ok {
					t.Fatalf("tuples %s and %s share key %q", prev, tuple, k)
				}
				seen[k] = tuple
			}
		}
	}
	if len(seen) != len(alphabet)*len(alphabet)*len(alphabet) {
		t.Fatalf("%d keys for %d tuples", len(seen), len(alphabet)*len(alphabet)*len(alphabet))
	}
}
