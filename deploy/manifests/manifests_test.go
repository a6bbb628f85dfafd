package manifests

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

const (
	groupDir  = "../kubernetes"
	staticDir = "../kubernetes/static"
)

// variants are the two kustomizations and the assignment mode each runs.
var variants = []struct{ dir, mode string }{{groupDir, "group"}, {staticDir, "static"}}

func load(t *testing.T, dir string) *Set {
	t.Helper()
	s, err := Load(dir)
	if err != nil {
		t.Fatalf("load %s: %v", dir, err)
	}
	return s
}

func TestManifestsAgreeWithJob(t *testing.T) {
	for _, v := range variants {
		t.Run(v.mode, func(t *testing.T) {
			s := load(t, v.dir)
			if err := Check(s, t.TempDir()); err != nil {
				t.Fatalf("%s disagrees with the job:\n%v", v.dir, err)
			}
			// Every kind the issue asks for is there.
			for _, kind := range []string{"StatefulSet", "ConfigMap", "Secret", "Service", "PodDisruptionBudget", "PrometheusRule"} {
				found := false
				for _, o := range s.Objects {
					found = found || o.Kind == kind
				}
				if !found {
					t.Errorf("%s: no %s", v.dir, kind)
				}
			}
			if len(All[*corev1.Service](s)) != 2 {
				t.Errorf("want the headless and the metrics Service, got %d Services", len(All[*corev1.Service](s)))
			}
			if s.Find("ConfigMap", "dedupstream-dashboard") == nil {
				t.Error("no dashboard ConfigMap")
			}
			// The variant runs the mode it claims, on every pod.
			sts := All[*appsv1.StatefulSet](s)[0]
			for i := range int(*sts.Spec.Replicas) {
				path, env, err := s.PodConfig(sts, i, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				data, _ := os.ReadFile(path)
				if !strings.Contains(string(data), "mode: "+v.mode) {
					t.Errorf("pod %d: job file is not in %s mode", i, v.mode)
				}
				if env["KAFKA_PASSWORD"] == "" {
					t.Errorf("pod %d: KAFKA_PASSWORD not set from the Secret", i)
				}
			}
			unlisted, err := Unlisted(v.dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(unlisted) > 0 {
				t.Errorf("files not in kustomization.yaml: %v", unlisted)
			}
		})
	}
}

func TestGeneratedInSync(t *testing.T) {
	want, err := Generate("../../configs")
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range want {
		got, err := os.ReadFile(filepath.Join(groupDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("deploy/kubernetes/%s differs from what configs/ gives: run `go generate ./manifests` in deploy/", name)
		}
	}
	// And the objects say the same as configs/, independently of the
	// generator's formatting.
	s := load(t, groupDir)
	dash, _ := os.ReadFile("../../configs/dashboard.json")
	if got := s.Find("ConfigMap", "dedupstream-dashboard").Obj.(*corev1.ConfigMap).Data[DashboardKey]; got != string(dash) {
		t.Error("dashboard ConfigMap does not hold configs/dashboard.json")
	}
	alerts, _ := os.ReadFile("../../configs/alerts.yml")
	var spec monitoringv1.PrometheusRuleSpec
	if err := unmarshalStrict(alerts, &spec); err != nil {
		t.Fatal(err)
	}
	rule := s.Find("PrometheusRule", "dedupstream").Obj.(*monitoringv1.PrometheusRule)
	a, _ := yaml.Marshal(spec)
	b, _ := yaml.Marshal(rule.Spec)
	if !bytes.Equal(a, b) || len(spec.Groups) == 0 {
		t.Errorf("PrometheusRule spec differs from configs/alerts.yml (%d groups there)", len(spec.Groups))
	}
}

// TestCheckCatchesDisagreement plants, one at a time, the mistakes Check
// exists for, and wants each named.
func TestCheckCatchesDisagreement(t *testing.T) {
	type mutation struct {
		name, dir string
		edit      func(*Set)
		want      string
	}
	stsOf := func(s *Set) *appsv1.StatefulSet { return All[*appsv1.StatefulSet](s)[0] }
	ctr := func(s *Set) *corev1.Container { return &stsOf(s).Spec.Template.Spec.Containers[0] }
	job := func(s *Set, old, new string) {
		cm := s.Find("ConfigMap", "dedupstream-config").Obj.(*corev1.ConfigMap)
		if !strings.Contains(cm.Data["job.yaml"], old) {
			panic("job.yaml has no " + old)
		}
		cm.Data["job.yaml"] = strings.Replace(cm.Data["job.yaml"], old, new, 1)
	}
	cases := []mutation{
		{"readiness probe on another port", groupDir, func(s *Set) { ctr(s).ReadinessProbe.HTTPGet.Port = intstr.FromInt32(9465) }, "readinessProbe.httpGet.port: reaches 9465"},
		{"liveness probe on a port name the container lacks", groupDir, func(s *Set) { ctr(s).LivenessProbe.HTTPGet.Port = intstr.FromString("http") }, "livenessProbe.httpGet.port: reaches 0"},
		{"readiness on /livez", groupDir, func(s *Set) { ctr(s).ReadinessProbe.HTTPGet.Path = "/livez" }, "readinessProbe.httpGet.path: want /readyz"},
		{"metrics.listen on loopback", groupDir, func(s *Set) { job(s, "listen: 0.0.0.0:9464", "listen: 127.0.0.1:9464") }, "metrics.listen: 127.0.0.1:9464 is loopback"},
		{"metrics.listen on one pod-external address", groupDir, func(s *Set) { job(s, "listen: 0.0.0.0:9464", "listen: 10.0.0.7:9464") }, "metrics.listen: 10.0.0.7:9464 binds one address"},
		{"metrics.listen on localhost", groupDir, func(s *Set) { job(s, "listen: 0.0.0.0:9464", "listen: localhost:9464") }, "metrics.listen: localhost:9464 is loopback"},
		{"metrics.listen on another port", groupDir, func(s *Set) { job(s, "listen: 0.0.0.0:9464", "listen: 0.0.0.0:9000") }, "metrics.listen port 9000 is not a containerPort"},
		{"grace period equal to the shutdown timeout", groupDir, func(s *Set) { g := int64(30); stsOf(s).Spec.Template.Spec.TerminationGracePeriodSeconds = &g }, "terminationGracePeriodSeconds: 30s is not above"},
		{"grace period left to the default", groupDir, func(s *Set) { stsOf(s).Spec.Template.Spec.TerminationGracePeriodSeconds = nil }, "terminationGracePeriodSeconds: 30s is not above"},
		{"shutdown timeout raised past the grace period", groupDir, func(s *Set) { job(s, "shutdown_timeout: 30s", "shutdown_timeout: 55s") }, "is not above commit.shutdown_timeout 55s"},
		{"state volume mounted elsewhere", groupDir, func(s *Set) { ctr(s).VolumeMounts[0].MountPath = "/data" }, "state.dir /var/lib/dedupstream is not the mountPath"},
		{"state.dir moved", groupDir, func(s *Set) { job(s, "dir: /var/lib/dedupstream", "dir: /var/lib/dedup") }, "state.dir /var/lib/dedup is not the mountPath"},
		{"memory request off the rule", groupDir, func(s *Set) { ctr(s).Resources.Requests[corev1.ResourceMemory] = resource.MustParse("2Gi") }, "resources.requests.memory: the sizing rule gives 1450Mi"},
		{"more partitions, same resources", groupDir, func(s *Set) { stsOf(s).Annotations[AnnotationPartitions] = "24" }, "requests.memory: the sizing rule gives"},
		{"bigger memory budget, same resources", groupDir, func(s *Set) { job(s, "memory: 1GiB", "memory: 2GiB") }, "requests.memory: the sizing rule gives"},
		{"cpu request off the rule", groupDir, func(s *Set) { ctr(s).Resources.Requests[corev1.ResourceCPU] = resource.MustParse("250m") }, "requests.cpu: the sizing rule gives 500m"},
		{"volume off the rule", groupDir, func(s *Set) {
			stsOf(s).Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage] = resource.MustParse("1Gi")
		}, "requests.storage: the sizing rule gives 2Gi"},
		{"job config invalid", groupDir, func(s *Set) { job(s, "window: 24h", "window: 24 hours") }, "does not pass the job's validation"},
		{"password secret key missing", groupDir, func(s *Set) { ctr(s).Env[0].ValueFrom.SecretKeyRef.Key = "pass" }, "Secret dedupstream-kafka has no key pass"},
		{"password env missing", groupDir, func(s *Set) { ctr(s).Env = ctr(s).Env[1:] }, "KAFKA_PASSWORD"},
		{"ordered pod management", groupDir, func(s *Set) { stsOf(s).Spec.PodManagementPolicy = appsv1.OrderedReadyPodManagement }, "podManagementPolicy: want Parallel"},
		{"runs as root", groupDir, func(s *Set) { u := int64(0); stsOf(s).Spec.Template.Spec.SecurityContext.RunAsUser = &u }, "runAsUser 65532"},
		{"metrics Service to another port", groupDir, func(s *Set) {
			s.Find("Service", "dedupstream-metrics").Obj.(*corev1.Service).Spec.Ports[0].TargetPort = intstr.FromInt32(8080)
		}, "Service dedupstream-metrics port metrics: targetPort reaches 8080"},
		{"headless Service selects other pods", groupDir, func(s *Set) {
			s.Find("Service", "dedupstream").Obj.(*corev1.Service).Spec.Selector = map[string]string{"app": "other"}
		}, `spec.serviceName "dedupstream": its selector`},
		{"no disruption budget", groupDir, func(s *Set) {
			s.Find("PodDisruptionBudget", "dedupstream").Obj.(*policyv1.PodDisruptionBudget).Spec.Selector.MatchLabels = map[string]string{"app": "other"}
		}, "want one PodDisruptionBudget"},
		{"static files overlap", staticDir, func(s *Set) {
			s.Find("ConfigMap", "dedupstream-config").Obj.(*corev1.ConfigMap).Data["dedupstream-1.yaml"] = "partitions: [0, 1, 4, 7, 10]\n"
		}, "both own partition 0"},
		{"static partition unowned", staticDir, func(s *Set) {
			s.Find("ConfigMap", "dedupstream-config").Obj.(*corev1.ConfigMap).Data["dedupstream-2.yaml"] = "partitions: [2, 5, 8]\n"
		}, "no pod owns partition 11"},
		{"static replica without a file", staticDir, func(s *Set) { r := int32(4); stsOf(s).Spec.Replicas = &r }, "dedupstream-3.yaml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := load(t, c.dir)
			c.edit(s)
			err := Check(s, t.TempDir())
			if err == nil {
				t.Fatalf("Check passed; want an error containing %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want an error containing %q, got:\n%v", c.want, err)
			}
		})
	}
}

// TestStrictDecoding: an unknown or misspelt field is an error, in a
// resource and in a patch, and so is a kind without an API type here.
func TestStrictDecoding(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec: {replica: 3}\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{name: m, port: 1, targetport: 2}]}\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec: {groups: [{name: g, rules: [{alert: A, expr: up, fore: 5m}]}]}\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
	} {
		if _, _, err := DecodeStrict([]byte(doc)); err == nil {
			t.Errorf("decoded without error:\n%s", doc)
		}
	}
	// A patch with a misspelt field fails the load of the overlay.
	dir := t.TempDir()
	abs, _ := filepath.Abs(groupDir)
	abs, _ = filepath.Rel(dir, abs)
	os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: ["+abs+"]\npatches: [{path: p.yaml}]\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: dedupstream}\nspec: {template: {spec: {terminationGracePeriod: 90}}}\n"), 0o644)
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "terminationGracePeriod") {
		t.Errorf("overlay with a misspelt patch field: want an error naming it, got %v", err)
	}
	// A well-formed patch lands.
	os.WriteFile(filepath.Join(dir, "p.yaml"), []byte("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: dedupstream}\nspec: {template: {spec: {terminationGracePeriodSeconds: 90}}}\n"), 0o644)
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if g := All[*appsv1.StatefulSet](s)[0].Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 90 {
		t.Errorf("patched grace period: got %v, want 90", g)
	}
}
