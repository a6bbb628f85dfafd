package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/progress"
	"github.com/twmb/franz-go/pkg/kfake"
)

// logLevels are the spellings --log-level and log.level accept.
var logLevels = []string{"debug", "info", "warn", "error"}

// logLevelFlag adds --log-level to fs with the given default ("" for run:
// the config's log.level then applies). The value is checked as it is
// parsed, so a bad level fails parse with exit 2 like any bad flag.
func logLevelFlag(fs *flag.FlagSet, def string) *string {
	level := def
	fs.Var((*levelValue)(&level), "log-level", "log `LEVEL`: debug, info, warn or error (logs go to stderr: text on a terminal, JSON otherwise)")
	return &level
}

// levelValue is the --log-level flag.
type levelValue string

func (l *levelValue) String() string { return string(*l) }

func (l *levelValue) Set(v string) error {
	if !slices.Contains(logLevels, v) {
		return fmt.Errorf("want one of %s", strings.Join(logLevels, ", "))
	}
	*l = levelValue(v)
	return nil
}

// newLogger builds a logger writing to w: JSON unless the format is
// "text", or "auto" and w is a terminal. Attributes whose key names a
// secret are redacted, also inside structs and maps logged whole.
func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level)) // validated by config or --log-level
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: redactAttr}
	if c.Format == "text" || c.Format == "auto" && progress.IsTerminal(w) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// Redacted replaces the value of every secret.
const Redacted = "[REDACTED]"

// secretWords mark a key or field name as a secret.
var secretWords = []string{"password", "passwd", "secret", "token", "credential", "private_key", "privatekey"}

func isSecret(name string) bool {
	name = strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return true
		}
	}
	return false
}

func redactAttr(_ []string, a slog.Attr) slog.Attr {
	if isSecret(a.Key) {
		return slog.String(a.Key, Redacted)
	}
	if a.Value.Kind() == slog.KindAny {
		if v := reflect.ValueOf(a.Value.Any()); hasStructure(v) {
			return slog.Any(a.Key, redactValue(v, 0))
		}
	}
	return a
}

// hasStructure reports whether v may hold named fields (a struct, a map,
// or a pointer or slice of those); errors and plain values are left alone.
func hasStructure(v reflect.Value) bool {
	if !v.IsValid() {
		return false
	}
	if _, ok := v.Interface().(error); ok {
		return false
	}
	t := v.Type()
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct || t.Kind() == reflect.Map
}

// redactValue copies v into maps and slices with every secret field or
// map entry (by Go name or yaml tag) replaced. Depth is bounded against
// cycles.
func redactValue(v reflect.Value, depth int) any {
	if depth > 16 {
		return "..."
	}
	switch v.Kind() {
	case reflect.Invalid:
		return nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return redactValue(v.Elem(), depth+1)
	case reflect.Struct:
		out := make(map[string]any, v.NumField())
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name := f.Name
			if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				name = tag
			}
			if isSecret(f.Name) || isSecret(name) {
				out[name] = Redacted
				continue
			}
			out[name] = redactValue(v.Field(i), depth+1)
		}
		return out
	case reflect.Map:
		out := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			k := fmt.Sprint(it.Key().Interface())
			if isSecret(k) {
				out[k] = Redacted
				continue
			}
			out[k] = redactValue(it.Value(), depth+1)
		}
		return out
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return fmt.Sprintf("%d bytes", v.Len())
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = redactValue(v.Index(i), depth+1)
		}
		return out
	}
	if v.CanInterface() {
		if s, ok := v.Interface().(fmt.Stringer); ok {
			return s.String()
		}
		return v.Interface()
	}
	return nil
}

// kfakeLogger passes the embedded broker's log lines to slog. kfake logs
// every request at its info level; that is debug here.
type kfakeLogger struct{ log *slog.Logger }

func (l kfakeLogger) Logf(level kfake.LogLevel, format string, args ...any) {
	sl := slog.LevelDebug
	switch level {
	case kfake.LogLevelError:
		sl = slog.LevelError
	case kfake.LogLevelWarn:
		sl = slog.LevelWarn
	}
	if l.log.Enabled(context.Background(), sl) {
		l.log.Log(context.Background(), sl, "kfake: "+fmt.Sprintf(format, args...))
	}
}
