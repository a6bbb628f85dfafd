package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The commands docs/deploy.md and the manifests' comments quote print what
// they say, on the shipped group-mode job file.
func TestDocumentedOutput(t *testing.T) {
	t.Setenv("KAFKA_PASSWORD", "x")
	data, err := os.ReadFile("../../kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The job file is the ConfigMap's block under "job.yaml: |".
	_, body, ok := strings.Cut(string(data), "  job.yaml: |\n")
	if !ok {
		t.Fatal("no job.yaml in configmap.yaml")
	}
	var job strings.Builder
	for _, l := range strings.SplitAfter(body, "\n") {
		job.WriteString(strings.TrimPrefix(l, "    "))
	}
	path := filepath.Join(t.TempDir(), "job.yaml")
	os.WriteFile(path, []byte(job.String()), 0o644)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-partitions", "12", "-replicas", "3", "-rate", "20000"}, []string{"requests 1450Mi, limits 1813Mi", "requests 500m", "state volume: 2Gi"}},
		{[]string{"-partitions", "12", "-static", "4,4,4", "-rate", "20000"}, []string{"requests 1358Mi, limits 1698Mi", "requests 500m", "state volume: 1Gi"}},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"-config", path}, tc.args...), &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errb.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v: output lacks %q:\n%s", tc.args, w, out.String())
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"-config", path, "-partitions", "12", "-static", "4,x"}, &out, &errb); code != 2 {
		t.Errorf("bad -static: exit %d, want 2", code)
	}
}
