package config

import (
	"strings"
	"testing"
)

// TestPipelineErrors: a config changed after Load so that a dedup field no
// longer parses gets an error from Pipeline naming the field, instead of a
// zero value taken silently.
func TestPipelineErrors(t *testing.T) {
	for field, set := range map[string]func(c *Config){
		"dedup.mode":      func(c *Config) { c.Dedup.Mode = "latest" },
		"dedup.time_base": func(c *Config) { c.Dedup.TimeBase = "wall" },
		"dedup.key[1]":    func(c *Config) { c.Dedup.Key = []string{"key", "json:"} },
		"dedup.version":   func(c *Config) { c.Dedup.Version = "nosuch:x" },
	} {
		c, err := load("testdata/good.yaml", env(map[string]string{"STATE_DIR": "/var/lib/ds"}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Pipeline(); err != nil {
			t.Fatalf("loaded config: %v", err)
		}
		set(c)
		if _, err := c.Pipeline(); err == nil || !strings.Contains(err.Error(), field+": ") {
			t.Errorf("%s: Pipeline error %v, want one naming the field", field, err)
		}
	}
}
