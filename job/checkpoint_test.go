package job_test

import (
	"bytes"
	"reflect"
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
		} {
			mb := more.AppendEncode(nil)
			want := byte(2)
			switch {
			case more.OutputTopic != "":
				want = 4
			case more.Dedup != "":
				want = 3
			}
			got, err := job.DecodeCheckpoint(mb)
			if mb[0] != want || err != nil || got.Partitions != more.Partitions || got.Dedup != more.Dedup || got.OutputTopic != more.OutputTopic ||
				got.Output != more.Output || len(got.Inputs) != len(more.Inputs) {
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
