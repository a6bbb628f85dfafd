package manifests

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/deploy/ociimage"
	"github.com/dedupstream/dedupstream/deploy/sizing"
)

// ShutdownMargin is how much longer than commit.shutdown_timeout the pod's
// terminationGracePeriodSeconds must be: after the stages' commits the
// process still closes its stores and writes Bloom snapshots (3.5 s at 10M
// keys, docs/benchmarks.md) before it exits; the kubelet SIGKILLs at the end
// of the grace period whatever is left.
const ShutdownMargin = 10 * time.Second

// Annotations on the StatefulSet holding the sizing rule's inputs that the
// job config does not hold.
const (
	AnnotationPartitions = "dedupstream/partitions"
	AnnotationRate       = "dedupstream/records-per-second-per-partition"
)

// Pod is one pod of a StatefulSet with the job config it loads.
type Pod struct {
	Name   string
	Config *config.Config
}

// Check verifies that every StatefulSet in s agrees with the job it runs
// and with the image: the job file it points at loads and validates with
// the container's environment (per pod, so a file named after the pod is
// found), metrics.listen is reachable from outside the pod on the port the
// probes and Services use, the state volume is mounted at state.dir, the
// grace period outlasts the shutdown, the resources follow the sizing rule,
// and the pods run as the image's user. workDir receives the ConfigMap files
// (one directory per pod). Every problem is reported, one per line.
func Check(s *Set, workDir string) error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	stss := All[*appsv1.StatefulSet](s)
	if len(stss) == 0 {
		add("no StatefulSet")
	}
	for _, sts := range stss {
		errs = append(errs, checkStatefulSet(s, sts, workDir)...)
	}
	return errors.Join(errs...)
}

func checkStatefulSet(s *Set, sts *appsv1.StatefulSet, workDir string) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("StatefulSet %s: "+format, append([]any{sts.Name}, args...)...))
	}
	spec := &sts.Spec
	pod := &spec.Template.Spec
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		add("spec.podManagementPolicy: want Parallel, got %q", spec.PodManagementPolicy)
	}
	replicas := 1
	if spec.Replicas != nil {
		replicas = int(*spec.Replicas)
	}
	if replicas < 1 {
		add("spec.replicas: want >= 1, got %d", replicas)
		return errs
	}
	podLabels := labels.Set(spec.Template.Labels)
	if sel := spec.Selector; sel == nil || !labels.SelectorFromSet(sel.MatchLabels).Matches(podLabels) {
		add("spec.selector does not select the pod template's labels %v", podLabels)
	}
	if len(pod.Containers) != 1 {
		add("want one container, got %d", len(pod.Containers))
		return errs
	}
	c := &pod.Containers[0]
	cpath := "spec.template.spec.containers[" + c.Name + "]"

	if len(c.Args) == 0 || c.Args[0] != "run" || len(c.Command) > 0 {
		add("%s: want args starting with the run command and the image's entrypoint, got command %q args %q", cpath, c.Command, c.Args)
	}
	// Load the job once per pod with the pod's environment.
	var pods []Pod
	for i := range replicas {
		name := fmt.Sprintf("%s-%d", sts.Name, i)
		path, env, err := s.PodConfig(sts, i, filepath.Join(workDir, name))
		if err != nil {
			add("%v", err)
			return errs
		}
		cfg, err := config.LoadEnv(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
		if err != nil {
			add("pod %s: the job file does not pass the job's validation:\n%v", name, err)
			continue
		}
		pods = append(pods, Pod{Name: name, Config: cfg})
	}
	if len(pods) < replicas {
		return errs
	}
	cfg := pods[0].Config

	// metrics.listen: not loopback, and the port the probes and Services use.
	port := checkListen(cfg.Metrics.Listen, add)
	if port > 0 {
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == port }) {
			add("%s.ports: metrics.listen port %d is not a containerPort", cpath, port)
		}
		checkProbe(c, "readinessProbe", c.ReadinessProbe, "/readyz", port, add)
		checkProbe(c, "livenessProbe", c.LivenessProbe, "/livez", port, add)
		for _, svc := range All[*corev1.Service](s) {
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
				continue
			}
			for _, sp := range svc.Spec.Ports {
				if p := resolvePort(c, sp.TargetPort); p != port {
					add("Service %s port %s: targetPort reaches %d, metrics.listen is on %d", svc.Name, sp.Name, p, port)
				}
			}
		}
	}
	if image := ociimage.MetricsPort; port > 0 && port != image {
		add("metrics.listen port %d differs from the port the image exposes (%d)", port, image)
	}

	// Services: the headless one the StatefulSet names.
	if hs := s.Find("Service", spec.ServiceName); hs == nil {
		add("spec.serviceName %q: no such Service", spec.ServiceName)
	} else if svc := hs.Obj.(*corev1.Service); svc.Spec.ClusterIP != corev1.ClusterIPNone {
		add("spec.serviceName %q: want a headless Service (clusterIP: None), got %q", svc.Name, svc.Spec.ClusterIP)
	} else if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		add("spec.serviceName %q: its selector %v does not select the pods", svc.Name, svc.Spec.Selector)
	}
	pdbs := 0
	for _, pdb := range All[*policyv1.PodDisruptionBudget](s) {
		if pdb.Spec.Selector != nil && labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
			pdbs++
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				add("PodDisruptionBudget %s: want maxUnavailable 1 (the sizing rule covers one pod away)", pdb.Name)
			}
		}
	}
	if pdbs != 1 {
		add("want one PodDisruptionBudget selecting the pods, got %d", pdbs)
	}

	// state.dir is the mount of a volume claimed per pod.
	stateMount := ""
	for _, m := range c.VolumeMounts {
		if slices.ContainsFunc(spec.VolumeClaimTemplates, func(t corev1.PersistentVolumeClaim) bool { return t.Name == m.Name }) {
			if m.ReadOnly {
				add("%s.volumeMounts[%s]: the state volume is read-only", cpath, m.Name)
			}
			if m.MountPath == filepath.Clean(cfg.State.Dir) {
				stateMount = m.Name
			}
		}
	}
	if stateMount == "" {
		add("%s: state.dir %s is not the mountPath of a volumeClaimTemplate", cpath, cfg.State.Dir)
	}

	// The grace period outlasts the job's shutdown.
	grace := 30 * time.Second // the API's default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	}
	if need := cfg.Commit.ShutdownTimeout + ShutdownMargin; grace < need {
		add("spec.template.spec.terminationGracePeriodSeconds: %v is not above commit.shutdown_timeout %v + %v", grace, cfg.Commit.ShutdownTimeout, ShutdownMargin)
	}

	// The image's user; the volume writable by it.
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != ociimage.UID || sc.FSGroup == nil || *sc.FSGroup != ociimage.GID {
		add("spec.template.spec.securityContext: want runAsNonRoot, runAsUser %d and fsGroup %d (the image's user, and its state volume writable by it)", ociimage.UID, ociimage.GID)
	}

	checkAssignment(sts, pods, add)
	checkResources(sts, c, stateMount, pods, add)
	return errs
}

// checkAssignment: in static mode the pods' partitions files cover
// 0..N-1 exactly once.
func checkAssignment(sts *appsv1.StatefulSet, pods []Pod, add func(string, ...any)) {
	if pods[0].Config.Assignment.Mode != "static" {
		return
	}
	n, err := strconv.Atoi(sts.Annotations[AnnotationPartitions])
	if err != nil {
		return // checkResources reports it
	}
	owner := make(map[int]string)
	for _, p := range pods {
		for _, part := range p.Config.Assignment.Partitions {
			if part >= n {
				add("pod %s: partition %d is beyond the %d partitions of %s", p.Name, part, n, AnnotationPartitions)
			}
			if o, dup := owner[part]; dup {
				add("pods %s and %s both own partition %d: the newer would fence the older", o, p.Name, part)
			}
			owner[part] = p.Name
		}
	}
	for part := range n {
		if _, ok := owner[part]; !ok {
			add("no pod owns partition %d", part)
		}
	}
}

func checkResources(sts *appsv1.StatefulSet, c *corev1.Container, stateMount string, pods []Pod, add func(string, ...any)) {
	var in sizing.Inputs
	var err error
	if in.Partitions, err = strconv.Atoi(sts.Annotations[AnnotationPartitions]); err != nil {
		add("metadata.annotations[%s]: want the output topic's partition count: %v", AnnotationPartitions, err)
		return
	}
	if in.RecordsPerSecond, err = strconv.ParseFloat(sts.Annotations[AnnotationRate], 64); err != nil {
		add("metadata.annotations[%s]: want the peak records/s per partition: %v", AnnotationRate, err)
		return
	}
	in.Replicas = len(pods)
	if pods[0].Config.Assignment.Mode == "static" {
		for _, p := range pods {
			in.StaticShares = append(in.StaticShares, len(p.Config.Assignment.Partitions))
		}
	}
	plan, err := sizing.Size(pods[0].Config, in)
	if err != nil {
		add("%v", err)
		return
	}
	want := func(field string, got resource.Quantity, ok bool, want int64, unit string) {
		if !ok || got.Value() != want {
			add("spec.template.spec.containers[%s].resources.%s: the sizing rule gives %s for %d partitions on %d replicas (%s), got %s",
				c.Name, field, unit, in.Partitions, in.Replicas, describe(plan), got.String())
		}
	}
	mr, ok := c.Resources.Requests[corev1.ResourceMemory]
	want("requests.memory", mr, ok, plan.MemoryRequest, sizing.Bytes(plan.MemoryRequest))
	ml, ok := c.Resources.Limits[corev1.ResourceMemory]
	want("limits.memory", ml, ok, plan.MemoryLimit, sizing.Bytes(plan.MemoryLimit))
	cr, ok := c.Resources.Requests[corev1.ResourceCPU]
	if !ok || cr.MilliValue() != plan.CPURequestMilli {
		add("spec.template.spec.containers[%s].resources.requests.cpu: the sizing rule gives %s (%s), got %s", c.Name, sizing.Milli(plan.CPURequestMilli), describe(plan), cr.String())
	}
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name != stateMount {
			continue
		}
		st, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]
		if !ok || st.Value() != plan.DiskBytes {
			add("spec.volumeClaimTemplates[%s].spec.resources.requests.storage: the sizing rule gives %s, got %s", t.Name, sizing.Bytes(plan.DiskBytes), st.String())
		}
	}
}

func describe(p sizing.Plan) string {
	return fmt.Sprintf("memory for %d partitions, CPU for %d", p.MemoryStages, p.CPUStages)
}

// checkListen returns metrics.listen's port, after checking that a kubelet
// and Prometheus outside the pod can reach it.
func checkListen(listen string, add func(string, ...any)) int {
	if listen == "off" {
		add("metrics.listen: off, but the probes need /readyz and /livez")
		return 0
	}
	host, ps, err := net.SplitHostPort(listen)
	if err != nil {
		add("metrics.listen: %v", err)
		return 0
	}
	if host == "localhost" {
		add("metrics.listen: %s is loopback: the kubelet's probes and Prometheus reach the pod's IP; use 0.0.0.0:%s", listen, ps)
	} else if host != "" {
		ip := net.ParseIP(host)
		if ip != nil && ip.IsLoopback() {
			add("metrics.listen: %s is loopback: the kubelet's probes and Prometheus reach the pod's IP; use 0.0.0.0:%s", listen, ps)
		} else if ip == nil || !ip.IsUnspecified() {
			add("metrics.listen: %s binds one address (loopback or an address the pod does not know in advance); use 0.0.0.0:%s", listen, ps)
		}
	}
	port, err := strconv.Atoi(ps)
	if err != nil || port <= 0 {
		add("metrics.listen: %s: want a fixed port the probes can name", listen)
		return 0
	}
	return port
}

func checkProbe(c *corev1.Container, field string, p *corev1.Probe, path string, port int, add func(string, ...any)) {
	f := "spec.template.spec.containers[" + c.Name + "]." + field
	if p == nil || p.HTTPGet == nil {
		add("%s: want an httpGet probe of %s", f, path)
		return
	}
	if p.HTTPGet.Path != path {
		add("%s.httpGet.path: want %s, got %q", f, path, p.HTTPGet.Path)
	}
	if got := resolvePort(c, p.HTTPGet.Port); got != port {
		add("%s.httpGet.port: reaches %d, metrics.listen is on %d", f, got, port)
	}
}

// resolvePort turns a port number or a container port name into a number;
// 0 when a name is not one of the container's.
func resolvePort(c *corev1.Container, p intstr.IntOrString) int {
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort)
		}
	}
	return 0
}

// PodConfig writes the files of the ConfigMap holding the job config of
// pod ordinal i of sts into dir and returns the job file's path there and
// the environment the container has (see environment). The job file is the
// --config argument of the run command, else the image's default.
func (s *Set) PodConfig(sts *appsv1.StatefulSet, i int, dir string) (string, map[string]string, error) {
	pod := &sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return "", nil, fmt.Errorf("want one container, got %d", len(pod.Containers))
	}
	c := &pod.Containers[0]
	cfgPath := ociimage.ConfigDir + "/job.yaml"
	if i := slices.Index(c.Args, "--config"); i >= 0 && i+1 < len(c.Args) {
		cfgPath = c.Args[i+1]
	}
	cm, key := mountedConfigMap(s, pod, c, cfgPath)
	if cm == nil {
		return "", nil, fmt.Errorf("containers[%s]: --config %s is not a key of a ConfigMap mounted in the container", c.Name, cfgPath)
	}
	if err := writeConfigMap(dir, cm); err != nil {
		return "", nil, err
	}
	env, errs := environment(s, fmt.Sprintf("%s-%d", sts.Name, i), c)
	if len(errs) > 0 {
		return "", nil, fmt.Errorf("containers[%s].env: %w", c.Name, errors.Join(errs...))
	}
	return filepath.Join(dir, key), env, nil
}

// mountedConfigMap finds the ConfigMap key a file path in the container
// reads.
func mountedConfigMap(s *Set, pod *corev1.PodSpec, c *corev1.Container, path string) (*corev1.ConfigMap, string) {
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") || m.SubPath != "" {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			o := s.Find("ConfigMap", v.ConfigMap.Name)
			if o == nil {
				return nil, ""
			}
			cm := o.Obj.(*corev1.ConfigMap)
			if _, ok := cm.Data[rel]; ok {
				return cm, rel
			}
		}
	}
	return nil, ""
}

func writeConfigMap(dir string, cm *corev1.ConfigMap) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// environment is the container's environment in pod name, as far as the
// job config can use it: literal values, Secret and ConfigMap keys of s, the
// pod's name and namespace. A reference to something s does not hold is an
// error (the pod would not start).
func environment(s *Set, podName string, c *corev1.Container) (map[string]string, []error) {
	env := map[string]string{}
	var errs []error
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			r := e.ValueFrom.SecretKeyRef
			o := s.Find("Secret", r.Name)
			if o == nil {
				errs = append(errs, fmt.Errorf("%s: no Secret %s", e.Name, r.Name))
				continue
			}
			sec := o.Obj.(*corev1.Secret)
			if v, ok := sec.StringData[r.Key]; ok {
				env[e.Name] = v
			} else if v, ok := sec.Data[r.Key]; ok {
				env[e.Name] = string(v)
			} else {
				errs = append(errs, fmt.Errorf("%s: Secret %s has no key %s", e.Name, r.Name, r.Key))
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			r := e.ValueFrom.ConfigMapKeyRef
			o := s.Find("ConfigMap", r.Name)
			if o == nil {
				errs = append(errs, fmt.Errorf("%s: no ConfigMap %s", e.Name, r.Name))
				continue
			}
			v, ok := o.Obj.(*corev1.ConfigMap).Data[r.Key]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: ConfigMap %s has no key %s", e.Name, r.Name, r.Key))
			}
			env[e.Name] = v
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				env[e.Name] = podName
			default:
				env[e.Name] = "" // namespace, IPs: known only in the cluster
			}
		case e.ValueFrom.ResourceFieldRef != nil:
			r := e.ValueFrom.ResourceFieldRef
			q, ok := resourceOf(c, r.Resource)
			if !ok {
				errs = append(errs, fmt.Errorf("%s: the container sets no %s", e.Name, r.Resource))
			}
			env[e.Name] = strconv.FormatInt(q.Value(), 10)
		}
	}
	return env, errs
}

func resourceOf(c *corev1.Container, name string) (resource.Quantity, bool) {
	kind, res, _ := strings.Cut(name, ".")
	list := c.Resources.Requests
	if kind == "limits" {
		list = c.Resources.Limits
	}
	q, ok := list[corev1.ResourceName(res)]
	return q, ok
}
