package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Kustomization is the part of kustomize's file format these manifests use;
// anything else in a kustomization.yaml is an error, so a field this check
// does not understand cannot pass unseen.
type Kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources,omitempty"`
	Patches    []struct {
		Path string `json:"path"`
	} `json:"patches,omitempty"`
	Images []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
}

// Object is one decoded manifest and where it came from.
type Object struct {
	File string // path of the file it was read from
	Kind string
	Name string
	Obj  any // *corev1.ConfigMap, *appsv1.StatefulSet, ...
}

// Set is the objects a kustomization directory produces.
type Set struct {
	Dir     string
	Objects []*Object
}

// newObject maps the kinds deploy/kubernetes may hold to their API types.
// A kind missing here is an error: add it with its type, not as a map.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + " " + kind {
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1 Secret":
		return &corev1.Secret{}, nil
	case "v1 Service":
		return &corev1.Service{}, nil
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		return &monitoringv1.PrometheusRule{}, nil
	}
	return nil, fmt.Errorf("kind %q of apiVersion %q is not one deploy/kubernetes may use", kind, apiVersion)
}

// DecodeStrict decodes one YAML document into its API type: unknown and
// duplicated fields are errors.
func DecodeStrict(doc []byte) (any, metav1.TypeMeta, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, tm, err
	}
	obj, err := newObject(tm.APIVersion, tm.Kind)
	if err != nil {
		return nil, tm, err
	}
	if err := unmarshalStrict(doc, obj); err != nil {
		return nil, tm, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, tm, nil
}

// unmarshalStrict decodes YAML the way the API server decodes with
// fieldValidation=Strict: field names match case-sensitively (encoding/json,
// which sigs.k8s.io/yaml's UnmarshalStrict uses, would take "targetport"
// for targetPort), and unknown or duplicated fields are errors.
func unmarshalStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// documents splits a multi-document YAML file, dropping empty documents
// (comments only).
func documents(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(data, []byte("\n---")) {
		var v any
		if yaml.Unmarshal(d, &v) == nil && v == nil {
			continue
		}
		docs = append(docs, d)
	}
	return docs
}

// Load reads the kustomization in dir: its resources (files, or
// directories holding a kustomization) in order, then its patches, applied
// as strategic merge patches on the object of the same kind and name.
func Load(dir string) (*Set, error) {
	kpath := filepath.Join(dir, "kustomization.yaml")
	data, err := os.ReadFile(kpath)
	if err != nil {
		return nil, err
	}
	var k Kustomization
	if err := unmarshalStrict(data, &k); err != nil {
		return nil, fmt.Errorf("%s: %w", kpath, err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		return nil, fmt.Errorf("%s: want kustomize.config.k8s.io/v1beta1 Kustomization, got %s %s", kpath, k.APIVersion, k.Kind)
	}
	set := &Set{Dir: dir}
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: resource %s: %w", kpath, r, err)
		}
		if st.IsDir() {
			sub, err := Load(p)
			if err != nil {
				return nil, err
			}
			set.Objects = append(set.Objects, sub.Objects...)
			continue
		}
		objs, err := loadFile(p)
		if err != nil {
			return nil, err
		}
		set.Objects = append(set.Objects, objs...)
	}
	for _, pt := range k.Patches {
		if err := set.patch(filepath.Join(dir, pt.Path)); err != nil {
			return nil, err
		}
	}
	for i, a := range set.Objects {
		for _, b := range set.Objects[i+1:] {
			if a.Kind == b.Kind && a.Name == b.Name {
				return nil, fmt.Errorf("%s and %s both define %s %s", a.File, b.File, a.Kind, a.Name)
			}
		}
	}
	return set, nil
}

// Unlisted returns the YAML files in dir that its kustomization neither
// lists as a resource nor as a patch: a manifest written but never applied.
func Unlisted(dir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	var k Kustomization
	if err := unmarshalStrict(data, &k); err != nil {
		return nil, err
	}
	listed := slices.Clone(k.Resources)
	for _, p := range k.Patches {
		listed = append(listed, p.Path)
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b := filepath.Base(f)
		if b != "kustomization.yaml" && !slices.Contains(listed, b) {
			out = append(out, f)
		}
	}
	return out, nil
}

func loadFile(path string) ([]*Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var objs []*Object
	for i, doc := range documents(data) {
		obj, tm, err := DecodeStrict(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		m, err := metaOf(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
		}
		if m.Name == "" {
			return nil, fmt.Errorf("%s: document %d: %s without metadata.name", path, i+1, tm.Kind)
		}
		objs = append(objs, &Object{File: path, Kind: tm.Kind, Name: m.Name, Obj: obj})
	}
	return objs, nil
}

func metaOf(obj any) (*metav1.ObjectMeta, error) {
	if o, ok := obj.(metav1.ObjectMetaAccessor); ok {
		return o.GetObjectMeta().(*metav1.ObjectMeta), nil
	}
	return nil, fmt.Errorf("%T has no metadata", obj)
}

// patch applies a strategic merge patch file (one document) to the object
// it names, the way kustomize's patches do for built-in kinds.
func (s *Set) patch(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs := documents(data)
	if len(docs) != 1 {
		return fmt.Errorf("%s: want one document in a patch, got %d", path, len(docs))
	}
	// The patch must itself decode strictly: a misspelt field in a patch
	// would otherwise be merged in and dropped without a word.
	pobj, tm, err := DecodeStrict(docs[0])
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	pm, err := metaOf(pobj)
	if err != nil {
		return err
	}
	var target *Object
	for _, o := range s.Objects {
		if o.Kind == tm.Kind && o.Name == pm.Name {
			target = o
		}
	}
	if target == nil {
		return fmt.Errorf("%s: patches %s %s, which the resources do not define", path, tm.Kind, pm.Name)
	}
	orig, err := yaml.Marshal(target.Obj)
	if err != nil {
		return err
	}
	origJSON, err := yaml.YAMLToJSON(orig)
	if err != nil {
		return err
	}
	patchJSON, err := yaml.YAMLToJSON(docs[0])
	if err != nil {
		return err
	}
	merged, err := strategicpatch.StrategicMergePatch(origJSON, patchJSON, pobj)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	obj, _, err := DecodeStrict(merged)
	if err != nil {
		return fmt.Errorf("%s: patched %s %s: %w", path, tm.Kind, pm.Name, err)
	}
	target.Obj = obj
	target.File = target.File + " + " + path
	return nil
}

// Find returns the object of a kind and name, or nil.
func (s *Set) Find(kind, name string) *Object {
	for _, o := range s.Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	return nil
}

// All returns the objects of a kind.
func All[T any](s *Set) []T {
	var out []T
	for _, o := range s.Objects {
		if t, ok := o.Obj.(T); ok {
			out = append(out, t)
		}
	}
	return out
}
