package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Problem is one thing wrong with a config file, located by file, line and
// field path.
type Problem struct {
	File  string
	Line  int
	Field string // dotted path, e.g. "dedup.window"
	Msg   string
}

func (p Problem) String() string {
	loc := p.File
	if p.Line > 0 {
		loc = fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	if p.Field == "" {
		return fmt.Sprintf("%s: %s", loc, p.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", loc, p.Field, p.Msg)
}

// Error lists every problem found in one pass, one per line.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// decoder turns a YAML node tree into a struct strictly: unknown keys,
// wrong types and bad durations or sizes are problems with their field
// path; decoding goes on after a problem so that one pass reports them all.
type decoder struct {
	file     string
	problems []Problem
	lines    map[string]int // field path -> line, for validation messages
}

func (d *decoder) addf(n *yaml.Node, path, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.problems = append(d.problems, Problem{File: d.file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	sizeType     = reflect.TypeFor[ByteSize]()
)

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return
		}
		n = n.Content[0]
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // an empty value keeps the default (and is not "set")
	}
	d.lines[path] = n.Line
	switch {
	case v.Type() == durationType:
		dur, err := time.ParseDuration(n.Value)
		if n.Kind != yaml.ScalarNode || err != nil {
			d.addf(n, path, "want a duration such as 100ms, 30s or 24h, got %q", n.Value)
			return
		}
		v.SetInt(int64(dur))
		return
	case v.Type() == sizeType:
		sz, err := ParseByteSize(n.Value)
		if n.Kind != yaml.ScalarNode || err != nil {
			d.addf(n, path, "want a size such as 64MiB or 1048576, got %q", n.Value)
			return
		}
		v.SetInt(int64(sz))
		return
	}
	switch v.Kind() {
	case reflect.Pointer: // an optional field: set means given
		e := reflect.New(v.Type().Elem())
		d.decode(n, e.Elem(), path)
		v.Set(e)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.addf(n, path, "want a list, got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			d.addf(n, path, "want a string, got %s", kindName(n))
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		b, err := strconv.ParseBool(n.Value)
		if n.Kind != yaml.ScalarNode || err != nil {
			d.addf(n, path, "want true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, v.Type().Bits())
		if n.Kind != yaml.ScalarNode || err != nil {
			d.addf(n, path, "want an integer, got %q", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		u, err := strconv.ParseUint(strings.ReplaceAll(n.Value, "_", ""), 0, v.Type().Bits())
		if n.Kind != yaml.ScalarNode || err != nil {
			d.addf(n, path, "want a non-negative integer, got %q", n.Value)
			return
		}
		v.SetUint(u)
	case reflect.Float64:
		f, err := strconv.ParseFloat(n.Value, 64)
		if n.Kind != yaml.ScalarNode || err != nil {
			d.addf(n, path, "want a number, got %q", n.Value)
			return
		}
		v.SetFloat(f)
	default:
		panic(fmt.Sprintf("config: no decoder for %s at %s", v.Type(), path))
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.addf(n, path, "want a mapping, got %s", kindName(n))
		return
	}
	fields := map[string]int{}
	var names []string
	for i := range v.NumField() {
		tag := v.Type().Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		fields[tag] = i
		names = append(names, tag)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		fp := join(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok {
			d.addf(k, fp, "unknown key (known keys here: %s)", strings.Join(names, ", "))
			continue
		}
		if seen[k.Value] {
			d.addf(k, fp, "key given twice")
			continue
		}
		seen[k.Value] = true
		d.decode(val, v.Field(idx), fp)
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return fmt.Sprintf("%q", n.Value)
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:([^}]*))?\}`)

// interpolate replaces ${VAR} and ${VAR:default} in the file text. An unset
// variable without a default is a problem; "$${" escapes a literal "${".
func interpolate(file string, text []byte, lookup func(string) (string, bool)) ([]byte, []Problem) {
	var problems []Problem
	lines := strings.SplitAfter(string(text), "\n")
	for i, line := range lines {
		const esc = "\x00escaped-dollar\x00"
		line = strings.ReplaceAll(line, "$${", esc)
		line = varRef.ReplaceAllStringFunc(line, func(ref string) string {
			m := varRef.FindStringSubmatch(ref)
			if v, ok := lookup(m[1]); ok {
				return v
			}
			if m[2] != "" {
				return m[3]
			}
			problems = append(problems, Problem{File: file, Line: i + 1, Msg: fmt.Sprintf("environment variable %s is not set and has no default (write ${%s:default})", m[1], m[1])})
			return ""
		})
		lines[i] = strings.ReplaceAll(line, esc, "${")
	}
	return []byte(strings.Join(lines, "")), problems
}

// decodeFile reads path, interpolates environment variables and decodes
// it strictly into v. It returns the field path -> line map for later
// validation messages.
func decodeFile(path string, v any, lookup func(string) (string, bool)) (map[string]int, []Problem) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, []Problem{{File: path, Msg: err.Error()}}
	}
	text, problems := interpolate(path, raw, lookup)
	var root yaml.Node
	if err := yaml.Unmarshal(text, &root); err != nil {
		return nil, append(problems, Problem{File: path, Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")})
	}
	d := &decoder{file: path, problems: problems, lines: map[string]int{}}
	if len(root.Content) > 0 {
		d.decode(&root, reflect.ValueOf(v).Elem(), "")
	}
	return d.lines, d.problems
}
