package config

import (
	"testing"
	"time"
)

func TestOutageFields(t *testing.T) {
	base := "job: {id: j}\ninput: {topics: [in]}\noutput: {topic: out}\nassignment: {partitions: [0]}\nstate: {dir: /tmp/s}\nkafka:\n  brokers: [\"h:1\"]\n"
	for _, tc := range []struct {
		name, extra string
		want        Kafka
		problem     string
	}{
		{name: "defaults", want: Kafka{RequestTimeout: 10 * time.Second, UnreachableAfter: 5 * time.Second, OnFenced: "recover", OnFencedBackoff: 5 * time.Second}},
		{name: "set", extra: "  request_timeout: 3s\n  unreachable_after: 2s\n  on_fenced: exit\n  on_fenced_backoff: 1s\n",
			want: Kafka{RequestTimeout: 3 * time.Second, UnreachableAfter: 2 * time.Second, OnFenced: "exit", OnFencedBackoff: time.Second}},
		{name: "on_fenced", extra: "  on_fenced: retry\n", problem: `job.yaml:8: kafka.on_fenced: must be one of recover, exit, got "retry"`},
		{name: "request_timeout", extra: "  request_timeout: 5ms\n", problem: "job.yaml:8: kafka.request_timeout: must be >= 100ms, got 5ms"},
		{name: "unreachable_after", extra: "  unreachable_after: -1s\n", problem: "job.yaml:8: kafka.unreachable_after: must be >= 100ms, got -1s"},
		{name: "on_fenced_backoff", extra: "  on_fenced_backoff: -1s\n", problem: "job.yaml:8: kafka.on_fenced_backoff: must be >= 0, got -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := loadCase(t, base+tc.extra, tc.problem)
			if !ok {
				return
			}
			k := c.Kafka
			if k.RequestTimeout != tc.want.RequestTimeout || k.UnreachableAfter != tc.want.UnreachableAfter ||
				k.OnFenced != tc.want.OnFenced || k.OnFencedBackoff != tc.want.OnFencedBackoff {
				t.Errorf("kafka = %+v, want %+v", k, tc.want)
			}
		})
	}
}
