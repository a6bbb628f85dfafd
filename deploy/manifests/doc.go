// Package manifests reads deploy/kubernetes the way `kubectl apply -k`
// would see it and checks it against the job it runs.
//
// # Strict decoding
//
// Load follows a kustomization.yaml: its resources (files, or directories
// with their own kustomization) in order, then its patches as strategic
// merge patches on the object of the same kind and name. Every document is
// decoded into its Kubernetes API type (k8s.io/api, the prometheus-operator
// types for PrometheusRule) the way the API server does with
// fieldValidation=Strict: an unknown field, a field spelt with other case,
// a duplicated field or a kind without a type here is an error, in
// resources and in patches alike.
//
// # Agreement with the job
//
// Check loads each pod's job file with the job's own validation
// (config.LoadEnv, what `dedupstream lint` runs) in the environment the
// container would have, then checks the StatefulSet against it: probes and
// Services on metrics.listen's port, metrics.listen reachable from outside
// the pod, the claimed volume at state.dir, the grace period above
// commit.shutdown_timeout + ShutdownMargin, the image's user, static
// partition files covering every partition once, and resources equal to
// package sizing's plan for the annotated partitions and rate.
//
// # Generated manifests
//
// Generate makes prometheusrule.yaml and dashboard.yaml from
// configs/alerts.yml and configs/dashboard.json (go generate ./manifests);
// the test fails when the committed files differ.
package manifests
