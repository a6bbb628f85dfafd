package manifests

//go:generate go run ../cmd/dsgen ../../configs ../kubernetes

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The files Generate writes into deploy/kubernetes from configs/.
const (
	PrometheusRuleFile = "prometheusrule.yaml"
	DashboardFile      = "dashboard.yaml"
	// DashboardKey is the dashboard's key in its ConfigMap; Grafana's
	// dashboard sidecar loads ConfigMaps labelled grafana_dashboard.
	DashboardKey = "dedupstream.json"
)

const generatedHeader = "# Generated from configs/%s by `go generate ./manifests` in deploy/: do not edit.\n# deploy/manifests's test fails when it differs from what configs/%s gives.\n"

// Generate returns the PrometheusRule made from configs/alerts.yml and the
// dashboard ConfigMap made from configs/dashboard.json, keyed by file name.
// The rule groups are decoded strictly into the PrometheusRule's spec, so a
// field of alerts.yml the operator would not understand is an error.
func Generate(configsDir string) (map[string][]byte, error) {
	alerts, err := os.ReadFile(filepath.Join(configsDir, "alerts.yml"))
	if err != nil {
		return nil, err
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := unmarshalStrict(alerts, &spec); err != nil {
		return nil, fmt.Errorf("configs/alerts.yml as a PrometheusRule spec: %w", err)
	}
	rule := monitoringv1.PrometheusRule{
		TypeMeta:   metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
		ObjectMeta: metav1.ObjectMeta{Name: "dedupstream", Labels: map[string]string{"app.kubernetes.io/name": "dedupstream"}},
		Spec:       spec,
	}
	dash, err := os.ReadFile(filepath.Join(configsDir, "dashboard.json"))
	if err != nil {
		return nil, err
	}
	cm := corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "dedupstream-dashboard", Labels: map[string]string{
			"app.kubernetes.io/name": "dedupstream",
			"grafana_dashboard":      "1",
		}},
		Data: map[string]string{DashboardKey: string(dash)},
	}
	out := map[string][]byte{}
	for file, v := range map[string]struct {
		src string
		obj any
	}{PrometheusRuleFile: {"alerts.yml", &rule}, DashboardFile: {"dashboard.json", &cm}} {
		b, err := yaml.Marshal(v.obj)
		if err != nil {
			return nil, err
		}
		// creationTimestamp: null is noise from the Go types.
		b = bytes.Replace(b, []byte("  creationTimestamp: null\n"), nil, 1)
		out[file] = append([]byte(fmt.Sprintf(generatedHeader, v.src, v.src)), b...)
	}
	return out, nil
}
