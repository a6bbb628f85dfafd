package job_test

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/job"
)

func TestCheckpointRoundTrip(t *testing.T) {
	for _, c := range []job.Checkpoint{
		{},
		{Output: 42},
		{Inputs: []job.InputOffset{{Topic: "orders-raw", Partition: 3, Offset: 812}}, Output: 1 << 40},
		{Inputs: []job.InputOffset{{Topic: "a", Partition: 0, Offset: 0}, {Topic: strings.Repeat("t", 249), Partition: 1<<31 - 1, Offset: 1<<63 - 1}}, Output: 7},
	} {
		b := c.AppendEncode(nil)
		if b[0] != 1 {
			t.Errorf("%+v: version byte %d, want 1", c, b[0])
		}
		for _, more := range []job.Checkpoint{
			{Inputs: c.Inputs, Output: c.Output, Partitions: 6},
			{Inputs: c.Inputs, Output: c.Output, Partitions: 6, Dedup: "key=json:order_id mode=first span=6h0m0s"},
			{Inputs: c.Inputs, Output: c.Output, Dedup: "key=key mode=version span=1m0s version=header:v"},
			{Inputs: c.Inputs, Output: c.Output, Partitions: 6, Dedup: "key=key mode=first span=1h0m0s", OutputTopic: "orders-dedup"},
			{Inputs: c.Inputs, Output: c.Output, OutputTopic: strings.Repeat("o", 249)},
			{Inputs: c.Inputs, Output: c.Output, Partitions: 6, Dedup: "key=key mode=first span=15m0s", OutputTopic: "orders-dedup",
				Marks: []job.GenMark{{Gen: 1964, Offset: 0}}, MarksSpan: 900_000},
			{Inputs: c.Inputs, Output: c.Output, Partitions: 6, Dedup: "key=key mode=first span=15m0s", OutputTopic: "orders-dedup",
				Marks: []job.GenMark{{Gen: 7, Offset: 0}, {Gen: 9, Offset: 120}, {Gen: 10, Offset: 120}, {Gen: 1<<64 - 1, Offset: 1<<63 - 1}}, MarksSpan: 1<<63 - 1},
			// Marks without the rest: version 5 all the same, the output
			// topic unknown (and then the marks not used).
			{Inputs: c.Inputs, Output: c.Output, Marks: []job.GenMark{{Gen: 3, Offset: 5}}, MarksSpan: 1},
		} {
			mb := more.AppendEncode(nil)
			want := byte(2)
			switch {
			case len(more.Marks) > 0:
				want = 5
			case more.OutputTopic != "":
				want = 4
			case more.Dedup != "":
				want = 3
			}
			got, err := job.DecodeCheckpoint(mb)
			if mb[0] != want || err != nil || got.Partitions != more.Partitions || got.Dedup != more.Dedup || got.OutputTopic != more.OutputTopic ||
				got.Output != more.Output || len(got.Inputs) != len(more.Inputs) || !slices.Equal(got.Marks, more.Marks) || got.MarksSpan != more.MarksSpan {
				t.Errorf("round trip of %+v: version %d (want %d), got %+v, %v", more, mb[0], want, got, err)
			}
		}
		got, err := job.DecodeCheckpoint(b)
		if err != nil || !reflect.DeepEqual(got, c) && !(len(c.Inputs) == 0 && len(got.Inputs) == 0 && got.Output == c.Output) {
			t.Errorf("round trip of %+v: got %+v, %v", c, got, err)
		}
	}
	if c, err := job.DecodeCheckpoint(nil); err != nil || c.Output != 0 || len(c.Inputs) != 0 {
		t.Errorf("empty checkpoint: %+v, %v; want the zero Checkpoint", c, err)
	}
	c := job.Checkpoint{Inputs: []job.InputOffset{{Topic: "x", Partition: 1, Offset: 2}}, Output: 3}
	if got := c.Input("x", 1); got != 2 {
		t.Errorf("Input(x, 1) = %d, want 2", got)
	}
	if got := c.Input("x", 2); got != -1 {
		t.Errorf("Input(x, 2) = %d, want -1", got)
	}
}

func TestCheckpointRejects(t *testing.T) {
	good := job.Checkpoint{Inputs: []job.InputOffset{{Topic: "orders", Partition: 2, Offset: 9}}, Output: 5}.AppendEncode(nil)
	// The version 5 cases below each break one thing of this one.
	v5 := []byte{5, 0, 0, 4, 0, 1, 'o', 100, 1, 3, 5}
	if c, err := job.DecodeCheckpoint(v5); err != nil || c.OutputTopic != "o" || c.MarksSpan != 100 || !slices.Equal(c.Marks, []job.GenMark{{Gen: 3, Offset: 5}}) {
		t.Fatalf("decode %v: %+v, %v", v5, c, err)
	}
	for name, b := range map[string][]byte{
		"unknown version":  append([]byte{2}, good[1:]...),
		"trailing bytes":   append(bytes.Clone(good), 0),
		"truncated":        good[:len(good)-1],
		"topic too long":   {1, 1, 0xfa, 0x01},
		"bad varint":       {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"v2 without count": {2, 0, 0, 0},
		"v3 empty dedup":   {3, 0, 0, 4, 0},
		"v3 dedup cut":     {3, 0, 0, 4, 5, 'k', 'e'},
		"v4 empty output":  {4, 0, 0, 4, 0, 0},
		"v4 output cut":    {4, 0, 0, 4, 0, 3, 'o', 'u'},
		"v4 output long":   append([]byte{4, 0, 0, 4, 0, 0xfa, 0x01}, bytes.Repeat([]byte{'o'}, 250)...),
		"version 0":        append([]byte{0}, good[1:]...),
		"version 6":        append([]byte{6}, good[1:]...),
		// Version 5: inputs 0, output 0, partitions 4, dedup "", output
		// "o", then span, count and the marks.
		"v5 without marks":        {5, 0, 0, 4, 0, 1, 'o'},
		"v5 span 0":               {5, 0, 0, 4, 0, 1, 'o', 0, 1, 3, 5},
		"v5 no marks":             {5, 0, 0, 4, 0, 1, 'o', 100, 0},
		"v5 marks cut":            {5, 0, 0, 4, 0, 1, 'o', 100, 2, 3, 5},
		"v5 mark offset cut":      {5, 0, 0, 4, 0, 1, 'o', 100, 1, 3},
		"v5 too many marks":       {5, 0, 0, 4, 0, 1, 'o', 100, 0x81, 0x08, 3, 5},
		"v5 generation repeated":  {5, 0, 0, 4, 0, 1, 'o', 100, 2, 3, 5, 3, 6},
		"v5 generation backwards": {5, 0, 0, 4, 0, 1, 'o', 100, 2, 4, 5, 3, 6},
		"v5 offset backwards":     {5, 0, 0, 4, 0, 1, 'o', 100, 2, 3, 5, 4, 4},
		"v5 overlong span":        {5, 0, 0, 4, 0, 1, 'o', 0xe4, 0x00, 1, 3, 5},
		"v5 overlong generation":  {5, 0, 0, 4, 0, 1, 'o', 100, 1, 0x83, 0x00, 5},
		"v5 overlong offset":      {5, 0, 0, 4, 0, 1, 'o', 100, 1, 3, 0x85, 0x00},
		"v5 offset past int64":    {5, 0, 0, 4, 0, 1, 'o', 100, 1, 3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"v5 trailing bytes":       {5, 0, 0, 4, 0, 1, 'o', 100, 1, 3, 5, 0},
	} {
		if _, err := job.DecodeCheckpoint(b); err == nil || !strings.HasPrefix(err.Error(), "job: corrupt checkpoint") {
			t.Errorf("%s: want a corrupt checkpoint error, got %v", name, err)
		}
	}
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Add([]byte{})
	f.Add(job.Checkpoint{Inputs: []job.InputOffset{{Topic: "orders", Partition: 2, Offset: 9}}, Output: 5}.AppendEncode(nil))
	f.Add(job.Checkpoint{Inputs: []job.InputOffset{{Topic: "orders", Partition: 2, Offset: 9}}, Output: 5, Partitions: 4, Dedup: "key=key mode=first span=6h0m0s"}.AppendEncode(nil))
	f.Add(job.Checkpoint{Inputs: []job.InputOffset{{Topic: "orders", Partition: 2, Offset: 9}}, Output: 5, Partitions: 4, OutputTopic: "orders-dedup"}.AppendEncode(nil))
	f.Add(job.Checkpoint{Inputs: []job.InputOffset{{Topic: "orders", Partition: 2, Offset: 9}}, Output: 5, Partitions: 4, OutputTopic: "orders-dedup",
		Marks: []job.GenMark{{Gen: 7, Offset: 0}, {Gen: 9, Offset: 4}}, MarksSpan: 900_000}.AppendEncode(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := job.DecodeCheckpoint(b)
		if err != nil || len(b) == 0 {
			return
		}
		// Whatever decodes re-encodes to the same bytes: one encoding per
		// checkpoint, so nothing else can be misread as a valid one.
		if again := c.AppendEncode(nil); !bytes.Equal(again, b) {
			t.Fatalf("decode(%x) = %+v re-encodes to %x", b, c, again)
		}
	})
}
