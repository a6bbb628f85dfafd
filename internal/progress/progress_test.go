package progress

import (
	"bytes"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestLines: a non-terminal writer gets one line per LineInterval while
// updates arrive, none in between, and the final line from Finish.
func TestLines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		p := New(&buf, "verify", 1000)
		for i := range 120 { // 12 s of updates, one per 100 ms
			time.Sleep(100 * time.Millisecond)
			p.Add(5)
			if i == 10 && buf.Len() != 0 {
				t.Fatalf("drew before the interval: %q", buf.String())
			}
		}
		p.Finish()
		p.Add(1) // after Finish: nothing more
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 3 {
			t.Fatalf("want 2 periodic lines and a final one, got %d:\n%s", len(lines), buf.String())
		}
		if want := "verify: 250/1000 (25.0%), 50/s, eta 15s"; lines[0] != want {
			t.Errorf("first line %q, want %q", lines[0], want)
		}
		if want := "verify: 600/1000 (60.0%), 50/s, eta 8s"; lines[2] != want {
			t.Errorf("final line %q, want %q", lines[2], want)
		}
	})
}

func TestFuncAndUnknownTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got []Snapshot
		var finals int
		p := NewFunc("restore", 0, time.Second, func(s Snapshot, final bool) {
			got = append(got, s)
			if final {
				finals++
			}
		})
		for range 25 {
			time.Sleep(100 * time.Millisecond)
			p.Add(10)
		}
		p.SetTotal(400)
		p.Finish()
		p.Finish()
		if len(got) != 3 || finals != 1 {
			t.Fatalf("want 2 calls and 1 final, got %d calls, %d finals: %+v", len(got), finals, got)
		}
		if got[0].Done != 100 || got[0].Fraction() != 0 || got[0].ETA() != 0 {
			t.Errorf("first call %+v: want 100 done, unknown fraction and eta", got[0])
		}
		if f := got[2].Fraction(); f != 250.0/400 {
			t.Errorf("final fraction %v, want %v", f, 250.0/400)
		}
	})
}

func TestBar(t *testing.T) {
	var buf bytes.Buffer
	drawBar(&buf, Snapshot{Label: "demo", Done: 50, Total: 100, Elapsed: time.Second}, false)
	want := "\rdemo [===============               ] 50/100 (50.0%), 50/s, eta 1s\x1b[K"
	if buf.String() != want {
		t.Errorf("bar %q, want %q", buf.String(), want)
	}
	buf.Reset()
	drawBar(&buf, Snapshot{Label: "demo", Done: 100, Total: 100, Elapsed: time.Second}, true)
	if !strings.HasSuffix(buf.String(), "\n") || !strings.Contains(buf.String(), "[==============================]") {
		t.Errorf("final bar %q", buf.String())
	}
	if IsTerminal(&buf) {
		t.Error("a buffer is not a terminal")
	}
}
