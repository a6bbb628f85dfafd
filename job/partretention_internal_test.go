package job

import "testing"

// TestRetentionDeletes pins which configs of the partitions topic let
// retention delete its records: "delete" in the policy with a finite
// retention.ms or retention.bytes, whatever else the policy holds.
func TestRetentionDeletes(t *testing.T) {
	for _, tc := range []struct {
		policy, ms, bytes string
		want              string
	}{
		{"compact", "604800000", "-1", ""},
		{"compact", "1000", "1024", ""}, // Kafka applies no retention under compact alone
		{"delete", "604800000", "-1", "cleanup.policy=delete, retention.ms=604800000"},
		{"delete", "-1", "1048576", "cleanup.policy=delete, retention.bytes=1048576"},
		{"delete", "-1", "-1", ""}, // kept for ever
		{"compact,delete", "604800000", "-1", "cleanup.policy=compact,delete, retention.ms=604800000"},
		{"delete, compact", "0", "0", "cleanup.policy=delete, compact, retention.ms=0, retention.bytes=0"},
		{"compact,delete", "-1", "-1", ""},
		{"delete", "", "-1", "cleanup.policy=delete, retention.ms="}, // unreadable: not "never"
		{"", "604800000", "-1", ""},
	} {
		got := retentionDeletes(map[string]string{"cleanup.policy": tc.policy, "retention.ms": tc.ms, "retention.bytes": tc.bytes})
		if got != tc.want {
			t.Errorf("cleanup.policy=%q retention.ms=%q retention.bytes=%q: got %q, want %q", tc.policy, tc.ms, tc.bytes, got, tc.want)
		}
	}
}
