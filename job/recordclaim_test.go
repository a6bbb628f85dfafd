package job

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// logRecord is one record of a partitions topic in a fold test.
type logRecord struct {
	key, value string
}

func foldLog(log []logRecord, keep func(i int) bool) map[string]string {
	recs := jobRecords{}
	for i, r := range log {
		if keep(i) {
			recs.fold([]byte(r.key), []byte(r.value), int64(i))
		}
	}
	out := map[string]string{}
	for k, r := range recs {
		out[k] = string(r.value)
	}
	return out
}

func all(int) bool { return true }

// TestFoldFirstClaimWholeLayout: of two racing claims the first in the log
// sets every key it holds, the later one none, whatever it holds; a plain
// record (Migrate's) after a claim replaces its key, one before a claim
// keeps it; other keys and malformed lines are ignored.
func TestFoldFirstClaimWholeLayout(t *testing.T) {
	c4 := string(claimValue(map[string]string{"partitions": "4", "route": "murmur2(key)", "output": "out4"}))
	c6 := string(claimValue(map[string]string{"partitions": "6", "route": "murmur2(id)", "output": "out6"}))
	for _, tc := range []struct {
		name string
		log  []logRecord
		want map[string]string
	}{
		{"first claim wins all keys", []logRecord{{"claim-a", c4}, {"claim-b", c6}},
			map[string]string{"partitions": "4", "route": "murmur2(key)", "output": "out4"}},
		{"the other order", []logRecord{{"claim-b", c6}, {"claim-a", c4}},
			map[string]string{"partitions": "6", "route": "murmur2(id)", "output": "out6"}},
		{"plain records before a claim stay", []logRecord{{"partitions", "8"}, {"claim-a", c4}, {"claim-b", c6}},
			map[string]string{"partitions": "8", "route": "murmur2(key)", "output": "out4"}},
		{"migrate's records after a claim replace it", []logRecord{{"claim-a", c4}, {"claim-b", c6}, {"partitions", "12"}, {"output", "out12"}},
			map[string]string{"partitions": "12", "route": "murmur2(key)", "output": "out12"}},
		{"other keys and bad lines are ignored", []logRecord{{"note", "partitions=3"}, {"claim-x", "garbage\nother=1\n"}, {"claim-a", c4}},
			map[string]string{"partitions": "4", "route": "murmur2(key)", "output": "out4"}},
	} {
		if got := foldLog(tc.log, all); !maps.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestClaimValueRoundTrip: whatever a layout value holds (a route naming a
// JSON member with a newline or "=" in it, a leading quote), the fold of
// its claim gives it back; a claim whose quoted value is cut sets nothing
// of that key.
func TestClaimValueRoundTrip(t *testing.T) {
	for _, route := range []string{"murmur2(key)", "murmur2(json:a\nroute=x)", "murmur2(json:a\r\nb)", `"quoted"`, `murmur2(header:x"y)`, "input fnv1a(kafka key)", ""} {
		want := map[string]string{"partitions": "4", "route": route, "output": "out"}
		if got := foldLog([]logRecord{{"claim-a", string(claimValue(want))}}, all); !maps.Equal(got, want) {
			t.Errorf("route %q: fold of its claim gives %q", route, got)
		}
	}
	if got := foldLog([]logRecord{{"claim-a", "route=\"murmur2(\n"}, {"claim-b", "route=murmur2(key)\n"}}, all); got["route"] != "murmur2(key)" {
		t.Errorf("a cut quoted value set the route: %q", got)
	}
}

// TestFoldSurvivesCompaction: the partitions topic is compacted, which
// keeps only the last record of each key. On random logs of claims (each
// of its own key, as claimJobRecords writes them) and plain records, the
// fold of the compacted log equals the fold of the whole log.
func TestFoldSurvivesCompaction(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		var log []logRecord
		for i := range 1 + rng.IntN(8) {
			if rng.IntN(3) == 0 {
				k := layoutKeys[rng.IntN(len(layoutKeys))]
				log = append(log, logRecord{k, fmt.Sprint(i)})
				continue
			}
			want := map[string]string{}
			for _, k := range layoutKeys {
				if rng.IntN(4) > 0 {
					want[k] = fmt.Sprint(i)
				}
			}
			log = append(log, logRecord{fmt.Sprintf("claim-%d", i), string(claimValue(want))})
		}
		last := map[string]int{}
		for i, r := range log {
			last[r.key] = i
		}
		whole, compacted := foldLog(log, all), foldLog(log, func(i int) bool { return last[log[i].key] == i })
		if !maps.Equal(whole, compacted) {
			t.Fatalf("trial %d: log %q folds to %v, compacted to %v", trial, log, whole, compacted)
		}
	}
}
