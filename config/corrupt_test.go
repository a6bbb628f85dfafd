package config

import "testing"

// TestOnCorruption: state.on_corruption defaults to restore, takes fail,
// and refuses anything else naming the file, line and field.
func TestOnCorruption(t *testing.T) {
	base := "job: {id: j}\ninput: {topics: [in]}\noutput: {topic: out}\nassignment: {partitions: [0]}\nkafka: {brokers: [\"h:1\"]}\nstate:\n  dir: /tmp/s\n"
	for _, tc := range []struct {
		name, extra, want, problem string
	}{
		{name: "default", want: "restore"},
		{name: "fail", extra: "  on_corruption: fail\n", want: "fail"},
		{name: "restore", extra: "  on_corruption: restore\n", want: "restore"},
		{name: "bad", extra: "  on_corruption: wipe\n", problem: `job.yaml:8: state.on_corruption: must be one of restore, fail, got "wipe"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := loadCase(t, base+tc.extra, tc.problem)
			if ok && c.State.OnCorruption != tc.want {
				t.Errorf("state.on_corruption = %q, want %q", c.State.OnCorruption, tc.want)
			}
		})
	}
}
