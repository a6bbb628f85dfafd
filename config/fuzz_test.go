package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary file text to the loader: it must return a config
// or an *Error, never panic.
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"testdata/good.yaml", "testdata/bad.yaml"} {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("dedup: [1, 2]\nstate: 3\n"))
	f.Add([]byte("job: &a {id: x}\nkafka: *a\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text []byte) {
		path := filepath.Join(dir, "job.yaml")
		if err := os.WriteFile(path, text, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := load(path, env(map[string]string{"STATE_DIR": "/s"}))
		if (c == nil) == (err == nil) {
			t.Fatalf("want exactly one of config and error, got %v and %v", c, err)
		}
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("want *Error, got %T: %v", err, err)
			}
		}
	})
}
