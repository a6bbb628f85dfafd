package harness

import (
	"fmt"

	"github.com/dedupstream/dedupstream/config"
	"io"
	"slices"
)

// KafkaRatio is a same-run ratio of two arms of a real-cluster run: the
// median over reps of A's records/s divided by B's in the same rep.
type KafkaRatio struct {
	A, B   string
	Median float64
	Min    float64
	Max    float64
	Reps   int
}

// KafkaRatios pairs the arms of a real-cluster run: each dedupstream arm
// with the copy-job arm on the same route and request sizes, each copy-job
// arm with the producer-perf arm on the same route, and each arm on another
// route with the same system and sizes on the first arm's route (the cost of
// the network delay), and each arm with other request sizes with the first
// arm of its system and route.
func KafkaRatios(results []Result) []KafkaRatio {
	type arm struct {
		name, system, route string
		interval            int64
		fetch, batch        int
	}
	var arms []arm
	rates := map[string]map[int]float64{} // arm -> rep -> records/s
	for _, r := range results {
		if r.Case != CaseKafka {
			continue
		}
		if rates[r.System] == nil {
			rates[r.System] = map[int]float64{}
			arms = append(arms, arm{r.System, systemOf(r.System), r.Route, r.IntervalMs, r.FetchMaxBytes, r.BatchMaxBytes})
		}
		rates[r.System][r.Rep] = r.RecordsPerSec
	}
	if len(arms) == 0 {
		return nil
	}
	sameSizes := func(a, b arm) bool { return a.interval == b.interval && a.fetch == b.fetch && a.batch == b.batch }
	// first is the first arm of a system on a route: the baseline of the
	// other request sizes.
	first := func(a arm) arm {
		return arms[slices.IndexFunc(arms, func(b arm) bool { return b.system == a.system && b.route == a.route })]
	}
	var pairs [][2]arm
	for _, a := range arms {
		for _, b := range arms {
			switch {
			case a.system == b.system && a.route == b.route && !sameSizes(a, b) && b == first(a):
				pairs = append(pairs, [2]arm{a, b})
			case a.system == SysDedup && b.system == SysCopy && a.route == b.route && sameSizes(a, b),
				a.system == SysCopy && b.system == SysProducerPerf && a.route == b.route,
				a.system == b.system && a.route != arms[0].route && b.route == arms[0].route && sameSizes(a, b):
				pairs = append(pairs, [2]arm{a, b})
			}
		}
	}
	var out []KafkaRatio
	for _, p := range pairs {
		var rs []float64
		for rep, ra := range rates[p[0].name] {
			if rb, ok := rates[p[1].name][rep]; ok && rb > 0 {
				rs = append(rs, ra/rb)
			}
		}
		if len(rs) == 0 {
			continue
		}
		out = append(out, KafkaRatio{A: p[0].name, B: p[1].name, Median: median(rs), Min: slices.Min(rs), Max: slices.Max(rs), Reps: len(rs)})
	}
	return out
}

// systemOf is the system an arm name starts with ("dedupstream rtt1ms" is
// dedupstream).
func systemOf(arm string) string {
	for _, s := range []string{SysDedup, SysCopy, SysProducerPerf, SysConsumerPerf} {
		if arm == s || len(arm) > len(s) && arm[:len(s)] == s && arm[len(s)] == ' ' {
			return s
		}
	}
	return arm
}

// writeKafkaTable writes the rows of the real-cluster case and its ratios.
func writeKafkaTable(w io.Writer, rows []Row, results []Result) {
	fmt.Fprintln(w, "| arm | route | commit interval | fetch / batch bytes | records/s (median, min-max) | MB/s | job CPU s | broker CPU s | job CPU us/record | valid |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		if r.Case != CaseKafka {
			continue
		}
		var mb, jc, bc, us []float64
		for _, x := range results {
			if x.Case == CaseKafka && x.System == r.System {
				mb, jc, bc, us = append(mb, x.MBPerSec), append(jc, x.JobCPUSec), append(bc, x.BrokerCPUSec), append(us, x.CPUUsPerRecord)
			}
		}
		f := r.First
		sizes := "-"
		if f.FetchMaxBytes > 0 || f.BatchMaxBytes > 0 {
			sizes = fmt.Sprintf("%v / %v", config.ByteSize(f.FetchMaxBytes), config.ByteSize(f.BatchMaxBytes))
		}
		valid := "yes"
		if !r.Valid {
			valid = "**INVALID**"
		}
		fmt.Fprintf(w, "| %s | %s | %dms | %s | %s (%s-%s, %d runs) | %.1f | %.1f | %.1f | %s | %s |\n", r.System, f.Route, f.IntervalMs, sizes,
			count(uint64(r.RecordsPerSec)), count(uint64(r.Min)), count(uint64(r.Max)), r.Reps, median(mb), median(jc), median(bc), num(median(us), "%.2f"), valid)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Same-run ratios (records/s of A / B within each rep; median, min-max over reps):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| A | B | A / B median | min-max | reps |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, k := range KafkaRatios(results) {
		fmt.Fprintf(w, "| %s | %s | %.2fx | %.2f-%.2f | %d |\n", k.A, k.B, k.Median, k.Min, k.Max, k.Reps)
	}
	fmt.Fprintln(w)
}

// KafkaTargets evaluates issue 13's targets on a real-cluster run, from the
// same-run ratios of its arms.
func KafkaTargets(results []Result) []Target {
	ratios := KafkaRatios(results)
	if len(ratios) == 0 {
		return nil
	}
	target := func(name string, min float64, match func(k KafkaRatio) bool) Target {
		t := Target{Name: name, Met: true}
		for _, k := range ratios {
			if match(k) {
				t.Measured += fmt.Sprintf("%s / %s: %.2fx (%d reps); ", k.A, k.B, k.Median, k.Reps)
				t.Met = t.Met && k.Median >= min
				t.Known = true
			}
		}
		return t
	}
	ts := []Target{
		target("real cluster: dedupstream >= 0.8x the copy job", 0.8, func(k KafkaRatio) bool {
			return systemOf(k.A) == SysDedup && systemOf(k.B) == SysCopy
		}),
		target("real cluster: copy job >= 1.0x ProducerPerformance (transactional, 1 MiB batches)", 1.0, func(k KafkaRatio) bool {
			return systemOf(k.A) == SysCopy && systemOf(k.B) == SysProducerPerf
		}),
		target("real cluster: with the round-trip delay >= 0.8x without", 0.8, func(k KafkaRatio) bool {
			return systemOf(k.A) == SysDedup && systemOf(k.B) == SysDedup && routeOf(results, k.A) != routeOf(results, k.B)
		}),
	}
	t := Target{Name: "real cluster: job CPU per record <= 2.4 us", Met: true}
	for _, r := range Summarise(results) {
		if r.Case != CaseKafka || systemOf(r.System) != SysDedup {
			continue
		}
		var us []float64
		where := "the harness process, read-back excluded"
		for _, x := range results {
			if x.Case == CaseKafka && x.System == r.System && x.CPUUsPerRecord > 0 {
				us = append(us, x.CPUUsPerRecord)
				if x.JobProcess != "" {
					where = "the job's " + x.JobProcess
				}
			}
		}
		if len(us) > 0 {
			m := median(us)
			t.Measured += fmt.Sprintf("%s: %.2f us (median of %d; %s); ", r.System, m, len(us), where)
			t.Met, t.Known = t.Met && m <= 2.4, true
		}
	}
	return append(ts, t)
}

func routeOf(results []Result, arm string) string {
	for _, r := range results {
		if r.Case == CaseKafka && r.System == arm {
			return r.Route
		}
	}
	return ""
}

// WritePlot draws a run's plot: the real-cluster bars when the run has the
// kafka case, else the two panels of Plots.
func WritePlot(w io.Writer, rows []Row) {
	if slices.ContainsFunc(rows, func(r Row) bool { return r.Case == CaseKafka }) {
		writeKafkaSVG(w, rows)
		return
	}
	WriteSVG(w, Plots(rows))
}

// writeKafkaSVG draws one horizontal bar per real-cluster arm: the median
// records/s, a whisker from the slowest to the fastest rep.
func writeKafkaSVG(w io.Writer, rows []Row) {
	var ks []Row
	for _, r := range rows {
		if r.Case == CaseKafka {
			ks = append(ks, r)
		}
	}
	const width, ml, mr, mt, bar = 900, 260, 40, 50, 26
	height := mt + len(ks)*bar + 50
	top := slices.MaxFunc(ks, func(a, b Row) int { return cmpFloat(a.Max, b.Max) }).Max
	colors := map[string]string{SysDedup: "#1f77b4", SysCopy: "#7f7f7f", SysProducerPerf: "#ff7f0e", SysConsumerPerf: "#2ca02c"}
	px := func(v float64) float64 { return ml + v/top*(width-ml-mr) }
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="24" text-anchor="middle" font-size="14">real cluster: records/s per arm (median, min-max over reps)</text>`+"\n", width/2)
	for i, r := range ks {
		y := float64(mt + i*bar)
		c := colors[systemOf(r.System)]
		if c == "" {
			c = "#9467bd"
		}
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", ml-8, y+bar/2+4, esc(r.System))
		fmt.Fprintf(w, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="%s"><title>%s: %s records/s</title></rect>`+"\n", ml, y+4, px(r.RecordsPerSec)-ml, bar-8, c, esc(r.System), count(uint64(r.RecordsPerSec)))
		fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", px(r.Min), y+bar/2, px(r.Max), y+bar/2)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", px(r.Max)+4, y+bar/2+4, count(uint64(r.RecordsPerSec)))
	}
	y0 := float64(mt + len(ks)*bar)
	fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", ml, y0, width-mr, y0)
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(f*top), y0+16, count(uint64(f*top)))
	}
	fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="middle">records/s</text>`+"\n", (ml+width-mr)/2, y0+36)
	fmt.Fprintln(w, "</svg>")
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
