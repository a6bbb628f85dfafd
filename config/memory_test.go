package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/statestore"
)

func TestStateMemory(t *testing.T) {
	parts16 := "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]"
	for _, c := range []struct {
		name, assignment, state string
		want                    string // a problem line; "" = valid
	}{
		{"default", "{partitions: " + parts16 + "}", "{dir: /s}", ""},
		{"fits", "{partitions: " + parts16 + "}", "{dir: /s, memory: 384MiB}", ""},
		{"too small for 16", "{partitions: " + parts16 + "}", "\n  dir: /s\n  memory: 256MiB",
			"job.yaml:8: state.memory: 256MiB is too small for 16 partitions: each store's 3 memtables of at least 4MiB must fit in half of it; raise it to at least 384MiB, or set state.memtable_size"},
		{"override fits", "{partitions: [0, 1, 2]}", "{dir: /s, memory: 32MiB, memtable_size: 1MiB}", ""},
		{"override too large", "{partitions: [0, 1, 2]}", "\n  dir: /s\n  memory: 32MiB\n  memtable_size: 4MiB",
			"job.yaml:9: state.memtable_size: 3 partitions x 3 memtables of 4MiB exceed half of state.memory (32MiB): lower it, or raise state.memory to at least 72MiB"},
		{"tiny memtable", "{partitions: [0]}", "\n  dir: /s\n  memtable_size: 1KiB",
			"job.yaml:8: state.memtable_size: must be between 32KiB and 4GiB, or 0 to derive it from state.memory, got 1KiB"},
		{"tiny budget", "{partitions: [0]}", "\n  dir: /s\n  memory: 1MiB", "job.yaml:8: state.memory: must be >= 4MiB, got 1MiB"},
		{"cache_size refused", "{partitions: [0]}", "\n  dir: /s\n  cache_size: 128MiB",
			"job.yaml:8: state.cache_size: replaced by state.memory"},
		// Group mode: the count is known per generation only.
		{"group", "{mode: group}", "{dir: /s, memory: 64MiB}", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "job.yaml")
			text := "job: {id: j}\nkafka: {brokers: [\"h:1\"]}\ninput: {topics: [a]}\noutput: {topic: b}\nassignment: " + c.assignment + "\nstate: " + c.state + "\n"
			if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := Load(cfg)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got.State.Memory == 0 || (strings.Contains(c.state, "memory") == (got.State.Memory == ByteSize(statestore.DefaultMemory))) {
					t.Fatalf("state.memory = %v", got.State.Memory)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want %q", c.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], filepath.Join(dir, c.want)) {
				t.Fatalf("got:\n%s\nwant one line starting %s", err, filepath.Join(dir, c.want))
			}
		})
	}
}
