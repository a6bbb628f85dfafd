package harness

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// WriteMarkdown writes the rows as tables (one per case) and the targets.
func WriteMarkdown(w io.Writer, run *Run, rows []Row) {
	fmt.Fprintf(w, "Run %s on %d CPUs (%s), %s; command: `%s`\n\n", run.Started, run.Host.CPUs, run.Host.Model, run.Host.GoVersion, run.Command)
	cases := []string{}
	for _, r := range rows {
		if !slices.Contains(cases, r.Case) {
			cases = append(cases, r.Case)
		}
	}
	for _, cs := range cases {
		fmt.Fprintf(w, "### %s\n\n", cs)
		if cs == CaseKafka {
			writeKafkaTable(w, rows, run.Results)
			continue
		}
		if cs == CaseLatencyEmbedded || cs == CaseLatencyExternal {
			writeLatencyTable(w, cs, run.Results)
			continue
		}
		switch cs {
		case CaseE2EEmbedded, CaseE2EExternal:
			fmt.Fprintln(w, "| system | keys in window | dup (measured) | records | records/s (median, min-max) | vs copy job | store reads/record | Bloom FP rate | disk B/key | escaped | lost | valid |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
		default:
			fmt.Fprintln(w, "| system | keys in window | dup (measured) | zipf | timed records | records/s (median, min-max) | vs map ceiling | vs Redis | latency p50 / p99 | RSS peak | mem B/key (beyond Bloom) | disk B/key | Bloom B/key | Bloom FP rate (est.) | store reads/record | ready: crash / rebuild / snapshot | escaped | lost | valid |")
			fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
		}
		for _, r := range rows {
			if r.Case != cs {
				continue
			}
			f := r.First
			valid := "yes"
			if !r.Valid {
				valid = "**INVALID**"
			}
			rps := fmt.Sprintf("%s (%s-%s, %d runs)", count(uint64(r.RecordsPerSec)), count(uint64(r.Min)), count(uint64(r.Max)), r.Reps)
			if r.Reps == 1 {
				rps = count(uint64(r.RecordsPerSec))
			}
			dup := fmt.Sprintf("%g%% (%.1f%%)", r.Dup*100, f.DupRatio*100)
			if cs == CaseE2EEmbedded || cs == CaseE2EExternal {
				vs := "-"
				if c, ok := find(rows, cs, SysCopy, r.Keys, r.Dup, r.Zipf); ok && r.System != SysCopy {
					vs = fmt.Sprintf("%.2fx", r.RecordsPerSec/c.RecordsPerSec)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |\n", r.System, count(uint64(r.Keys)), dup, count(r.Records), rps, vs,
					num(f.StoreReadsPerRecord, "%.3f"), num(f.BloomFPRate, "%.4f"), num(f.DiskBytesPerKey, "%.1f"), f.Correct.Escaped, f.Correct.Lost, valid)
				continue
			}
			vsMap, vsRedis := "-", "-"
			if r.System != SysMap {
				if m, ok := find(rows, cs, SysMap, r.Keys, r.Dup, r.Zipf); ok {
					vsMap = fmt.Sprintf("%.2fx", r.RecordsPerSec/m.RecordsPerSec)
				}
			}
			if r.System != SysRedis {
				if m, ok := find(rows, cs, SysRedis, r.Keys, r.Dup, r.Zipf); ok {
					vsRedis = fmt.Sprintf("%.1fx", r.RecordsPerSec/m.RecordsPerSec)
				}
			}
			lat := "-"
			if f.Latency != nil {
				lat = fmt.Sprintf("%s / %s", dur(f.Latency.P50), dur(f.Latency.P99))
			}
			mem := "-"
			if f.MemBytesPerKey != 0 {
				mem = fmt.Sprintf("%.1f", f.MemBytesPerKey)
				if f.MemBeyondBloomPerKey != 0 {
					mem += fmt.Sprintf(" (%.1f)", f.MemBeyondBloomPerKey)
				}
			}
			ready := "-"
			if f.ReadySnapshotSec > 0 {
				ready = fmt.Sprintf("%.2fs / %s / %.2fs", f.ReadyCrashSec, num(f.ReadyRebuildSec, "%.2fs"), f.ReadySnapshotSec)
			}
			fp := "-"
			if r.System == SysDedup {
				fp = fmt.Sprintf("%.4f (%.4f)", f.BloomFPRate, f.BloomFPRateEst)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %g | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %s |\n",
				r.System, count(uint64(r.Keys)), dup, r.Zipf, count(r.Records), rps, vsMap, vsRedis, lat, bytesOf(f.RSSPeakBytes), mem,
				num(f.DiskBytesPerKey, "%.1f"), num(f.BloomBytesPerKey, "%.2f"), fp, num(f.StoreReadsPerRecord, "%.3f"), ready, f.Correct.Escaped, f.Correct.Lost, valid)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "### Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | met |")
	fmt.Fprintln(w, "|---|---|---|")
	ts := Targets(rows)
	if slices.ContainsFunc(rows, func(r Row) bool { return r.Case == CaseKafka }) {
		// A real-cluster run measures issue 13's targets only.
		ts = KafkaTargets(run.Results)
	}
	for _, t := range ts {
		met := "not measured in this run"
		if t.Known {
			met = map[bool]string{true: "met", false: "**missed**"}[t.Met]
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.Name, strings.TrimSuffix(strings.TrimSpace(t.Measured), ";"), met)
	}
}

func num(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func dur(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.2fs", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.1fms", us/1e3)
	}
	return fmt.Sprintf("%.0fus", us)
}

func bytesOf(b uint64) string {
	switch {
	case b == 0:
		return "-"
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

// Series is one line of a plot.
type Series struct {
	Name   string
	Color  string
	Points [][2]float64 // x, y
}

// Panel is one chart.
type Panel struct {
	Title, XLabel, YLabel string
	LogX                  bool
	XFormat               func(float64) string
	Series                []Series
}

// Plots makes the two panels of a run: records/s against keys in the
// window (window size at a fixed key rate) and against the duplicate ratio.
func Plots(rows []Row) []Panel {
	colors := map[string]string{SysDedup: "#1f77b4", SysMap: "#2ca02c", SysRedis: "#d62728", SysCopy: "#7f7f7f"}
	systems := []string{SysDedup, SysMap, SysRedis}
	// Against the window: sweep rows, plus engine rows at the sweep's dup.
	var sweepDup float64 = -1
	for _, r := range rows {
		if r.Case == CaseSweep {
			sweepDup = r.Dup
			break
		}
	}
	win := Panel{Title: fmt.Sprintf("records/s vs window size (dup %g%%)", sweepDup*100), XLabel: "keys in the window", YLabel: "records/s (log scale)", LogX: true,
		XFormat: func(x float64) string { return count(uint64(x)) }}
	dup := Panel{Title: "records/s vs duplicate ratio", XLabel: "duplicate ratio", YLabel: "records/s (log scale)",
		XFormat: func(x float64) string { return fmt.Sprintf("%g%%", math.Round(x*1000)/10) }}
	dupKeys := 0
	for _, r := range rows {
		if r.Case == CaseEngine {
			dupKeys = r.Keys
			break
		}
	}
	if dupKeys > 0 {
		dup.Title = fmt.Sprintf("records/s vs duplicate ratio (%s keys in the window)", count(uint64(dupKeys)))
	}
	for _, sys := range systems {
		ws := Series{Name: sys, Color: colors[sys]}
		ds := Series{Name: sys, Color: colors[sys]}
		// Sweep points first; an engine point only where the sweep has none.
		for _, cs := range []string{CaseSweep, CaseEngine} {
			for _, r := range rows {
				if r.System != sys || r.Zipf != 0 || r.Case != cs {
					continue
				}
				if r.Dup == sweepDup && !slices.ContainsFunc(ws.Points, func(p [2]float64) bool { return p[0] == float64(r.Keys) }) {
					ws.Points = append(ws.Points, [2]float64{float64(r.Keys), r.RecordsPerSec})
				}
				if cs == CaseEngine && r.Keys == dupKeys {
					ds.Points = append(ds.Points, [2]float64{r.Dup, r.RecordsPerSec})
				}
			}
		}
		slices.SortFunc(ws.Points, func(a, b [2]float64) int { return int(math.Copysign(1, a[0]-b[0])) })
		slices.SortFunc(ds.Points, func(a, b [2]float64) int { return int(math.Copysign(1, a[0]-b[0])) })
		if len(ws.Points) > 0 {
			win.Series = append(win.Series, ws)
		}
		if len(ds.Points) > 0 {
			dup.Series = append(dup.Series, ds)
		}
	}
	return []Panel{win, dup}
}

// WriteSVG draws panels side by side: lines with markers, a log or linear x
// axis, a log y axis, gridlines and a legend.
func WriteSVG(w io.Writer, panels []Panel) {
	const pw, ph = 520, 360
	const ml, mr, mt, mb = 78, 20, 40, 70
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", pw*len(panels), ph, pw*len(panels), ph)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, p := range panels {
		ox := float64(i * pw)
		x0, x1 := ox+ml, ox+pw-mr
		y0, y1 := float64(ph-mb), float64(mt)
		fmt.Fprintf(w, `<text x="%.1f" y="20" text-anchor="middle" font-size="14">%s</text>`+"\n", ox+pw/2, esc(p.Title))
		var xs, ys []float64
		for _, s := range p.Series {
			for _, pt := range s.Points {
				xs = append(xs, pt[0])
				ys = append(ys, pt[1])
			}
		}
		if len(xs) == 0 {
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">not measured in this run</text>`+"\n", ox+pw/2, float64(ph)/2)
			continue
		}
		fx := func(v float64) float64 { return v }
		if p.LogX {
			fx = math.Log10
		}
		xmin, xmax := fx(slices.Min(xs)), fx(slices.Max(xs))
		if xmax == xmin {
			xmin, xmax = xmin-0.5, xmax+0.5
		}
		pad := (xmax - xmin) * 0.05
		xmin, xmax = xmin-pad, xmax+pad
		// A log y axis: ratios between systems read as equal distances.
		lo := math.Floor(math.Log10(slices.Min(ys)))
		hi := math.Ceil(math.Log10(slices.Max(ys)))
		if hi == lo {
			hi++
		}
		px := func(v float64) float64 { return x0 + (fx(v)-xmin)/(xmax-xmin)*(x1-x0) }
		py := func(v float64) float64 { return y0 - (math.Log10(v)-lo)/(hi-lo)*(y0-y1) }
		// Grid and y ticks at 1, 2 and 5 times powers of ten.
		for e := lo; e <= hi; e++ {
			for _, m := range []float64{1, 2, 5} {
				v := m * math.Pow(10, e)
				if v > math.Pow(10, hi) {
					break
				}
				stroke := "#eee"
				if m == 1 {
					stroke = "#ccc"
				}
				fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x0, py(v), x1, py(v), stroke)
				fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, py(v)+4, count(uint64(v)))
			}
		}
		// x ticks at the data points.
		var ticks []float64
		for _, x := range xs {
			if !slices.Contains(ticks, x) {
				ticks = append(ticks, x)
			}
		}
		for _, x := range ticks {
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", px(x), y0, px(x), y1)
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(x), y0+16, esc(p.XFormat(x)))
		}
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, y0, x1, y0)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, y0, x0, y1)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y0+36, esc(p.XLabel))
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">%s</text>`+"\n", ox+16, (y0+y1)/2, ox+16, (y0+y1)/2, esc(p.YLabel))
		for si, s := range p.Series {
			var pts []string
			for _, pt := range s.Points {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(pt[0]), py(pt[1])))
			}
			fmt.Fprintf(w, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.Color, strings.Join(pts, " "))
			for _, pt := range s.Points {
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %s records/s</title></circle>`+"\n", px(pt[0]), py(pt[1]), s.Color, esc(s.Name), count(uint64(pt[1])))
			}
			lx, ly := x0+float64(si)*140, float64(ph-14)
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, ly-4, lx+20, ly-4, s.Color)
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+25, ly, esc(s.Name))
		}
	}
	fmt.Fprintln(w, "</svg>")
}

func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
