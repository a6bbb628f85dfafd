package job

import "testing"

// TestOffsetMeta: the metadata committed with the input offsets round-trips
// its partition count, output topic and output end, and an older build's
// metadata (the count alone) or another tool's still reads.
func TestOffsetMeta(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want offsetMetadata
	}{
		{offsetMeta(6, "orders", 1234), offsetMetadata{6, "orders", 1234}},
		{offsetMeta(4, "orders.v2", 0), offsetMetadata{4, "orders.v2", 0}},
		{offsetMeta(4, "orders", -1), offsetMetadata{4, "orders", -1}},
		{"dedupstream partitions=8", offsetMetadata{8, "", -1}},
		{"dedupstream partitions=x output=o@1", offsetMetadata{0, "o", 1}},
		{"", offsetMetadata{0, "", -1}},
		{"some other tool", offsetMetadata{0, "", -1}},
	} {
		if got := parseOffsetMeta(tc.in); got != tc.want {
			t.Errorf("parseOffsetMeta(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
