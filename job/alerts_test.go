package job_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"go.yaml.in/yaml/v3"
)

const (
	alertsFile    = "../configs/alerts.yml"
	alertsTest    = "../configs/alerts_test.yml"
	dashboardFile = "../configs/dashboard.json"
)

// metricName matches the job's metric names inside PromQL; no label or
// function name starts with the prefix.
var metricName = regexp.MustCompile(`\bdedupstream_[a-zA-Z0-9_]+`)

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// expressions returns every alert expression by alert name and every
// dashboard target expression by panel title.
func expressions(t *testing.T) (alerts, panels map[string][]string) {
	t.Helper()
	var rf ruleFile
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rf); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	alerts = map[string][]string{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = append(alerts[r.Alert], r.Expr)
		}
	}
	var d dashboard
	if b, err = os.ReadFile(dashboardFile); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	panels = map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			panels[p.Title] = append(panels[p.Title], tg.Expr)
		}
	}
	return alerts, panels
}

// TestAlertAndDashboardMetrics: every metric named in a rule or a dashboard
// target is one the job exports, as gathered from a real registry after a
// run on the embedded broker (histograms with their _bucket, _sum and
// _count series); every required alert exists, the coordinator's timeout
// aborts counted both as fences and as ambiguous commits (outcome
// timed_out) in DedupstreamTransactionsTimedOut; the dashboard shows what
// the alerts watch.
func TestAlertAndDashboardMetrics(t *testing.T) {
	e := newEnv(t)
	w := e.workload(12, 1_000, 200)
	r := e.start(e.config("0, 1, 2, 3"), everyCommit)
	e.produce(w.Records)
	e.waitCommitted(r, 1, 30*time.Second)
	e.stop(r)
	exported := gather(t, r.job.Collector(), job.NewBuildInfo("test")).names()
	t.Logf("exported: %s", strings.Join(exported, " "))

	alerts, panels := expressions(t)
	for _, name := range []string{"DedupstreamDuplicateRatioHigh", "DedupstreamInterceptedDuplicatesUp",
		"DedupstreamProcessingLatencyHigh", "DedupstreamConsumerLagGrowing", "DedupstreamDLQRecords",
		"DedupstreamBrokersUnreachable", "DedupstreamTransactionsTimedOut", "DedupstreamStateCorrupt"} {
		if len(alerts[name]) == 0 {
			t.Errorf("%s lacks alert %s", alertsFile, name)
		}
	}
	if !strings.Contains(strings.Join(alerts["DedupstreamInterceptedDuplicatesUp"], ""), "offset 1h") ||
		!strings.Contains(strings.Join(alerts["DedupstreamProcessingLatencyHigh"], ""), "histogram_quantile(0.99") ||
		!strings.Contains(strings.Join(alerts["DedupstreamTransactionsTimedOut"], ""), `dedupstream_ambiguous_commits_total{outcome="timed_out"}`) {
		t.Errorf("alert expressions changed their meaning: %v", alerts)
	}
	check := func(file, what string, exprs []string) map[string]bool {
		used := map[string]bool{}
		for _, expr := range exprs {
			names := metricName.FindAllString(expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: %s: expression names no dedupstream metric: %s", file, what, expr)
			}
			for _, n := range names {
				used[n] = true
				if !slices.Contains(exported, n) {
					t.Errorf("%s: %s: metric %s is not exported by the job", file, what, n)
				}
			}
		}
		return used
	}
	inAlerts := map[string]bool{}
	for name, exprs := range alerts {
		for n := range check(alertsFile, name, exprs) {
			inAlerts[n] = true
		}
	}
	inPanels := map[string]bool{}
	for title, exprs := range panels {
		for n := range check(dashboardFile, title, exprs) {
			inPanels[n] = true
		}
	}
	for n := range inAlerts {
		if !inPanels[n] {
			t.Errorf("alerts watch %s but no dashboard panel shows it", n)
		}
	}
}

// promtool returns the path of promtool or skips the test.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (Debian: apt-get install prometheus; .ci/run installs it): rules not checked by promtool")
	}
	return path
}

// TestAlertRulesPromtool: promtool accepts the rules, their unit tests
// (configs/alerts_test.yml) pass, and every dashboard expression parses
// (checked as a recording rule, with Grafana's variables replaced).
func TestAlertRulesPromtool(t *testing.T) {
	pt := promtool(t)
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command(pt, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", alertsFile)
	run("test", "rules", alertsTest)

	_, panels := expressions(t)
	grafana := strings.NewReplacer(`$__rate_interval`, "5m", `"$job"`, `".+"`)
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	i := 0
	for _, exprs := range panels {
		for _, expr := range exprs {
			i++
			fmt.Fprintf(&b, "      - record: dashboard:expr%d\n        expr: %q\n", i, grafana.Replace(expr))
		}
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run("check", "rules", path)
	if i < 20 {
		t.Errorf("only %d dashboard expressions", i)
	}
}
