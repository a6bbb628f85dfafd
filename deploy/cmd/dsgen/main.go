// Command dsgen writes deploy/kubernetes/prometheusrule.yaml and
// dashboard.yaml from configs/alerts.yml and configs/dashboard.json
// (go generate ./manifests in deploy/ runs it).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/dedupstream/dedupstream/deploy/manifests"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: dsgen CONFIGS_DIR KUBERNETES_DIR")
		os.Exit(2)
	}
	files, err := manifests.Generate(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "dsgen:", err)
		os.Exit(1)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(os.Args[2], name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "dsgen:", err)
			os.Exit(1)
		}
	}
}
