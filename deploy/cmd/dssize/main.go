// Command dssize prints the resources of one dedupstream instance by the
// sizing rule of docs/deploy.md (package sizing), as Kubernetes quantities:
//
//	go run ./cmd/dssize -config job.yaml -partitions 12 -replicas 3 -rate 20000
//	go run ./cmd/dssize -config job.yaml -partitions 12 -static 4,4,4 -rate 20000
//
// Exit 2 on usage or config errors (the config's problems one per line).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/deploy/sizing"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dssize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "job config file (required)")
	var in sizing.Inputs
	fs.IntVar(&in.Partitions, "partitions", 0, "output topic partition count N (required)")
	fs.IntVar(&in.Replicas, "replicas", 1, "instances (group mode)")
	fs.Float64Var(&in.RecordsPerSecond, "rate", 0, "peak input records/s per partition")
	static := fs.String("static", "", "static mode: comma-separated partition count of each instance's file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" {
		fmt.Fprintln(stderr, "dssize: -config is required")
		return 2
	}
	if *static != "" {
		for _, f := range strings.Split(*static, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				fmt.Fprintf(stderr, "dssize: -static: want counts >= 1, got %q\n", f)
				return 2
			}
			in.StaticShares = append(in.StaticShares, n)
		}
		in.Replicas = len(in.StaticShares)
	}
	c, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	p, err := sizing.Size(c, in)
	if err != nil {
		fmt.Fprintln(stderr, "dssize:", err)
		return 2
	}
	fmt.Fprintf(stdout, "memory (sized for %d partitions): requests %s, limits %s\n", p.MemoryStages, sizing.Bytes(p.MemoryRequest), sizing.Bytes(p.MemoryLimit))
	fmt.Fprintf(stdout, "cpu (sized for %d partitions at %g records/s each): requests %s\n", p.CPUStages, in.RecordsPerSecond, sizing.Milli(p.CPURequestMilli))
	fmt.Fprintf(stdout, "state volume: %s\n", sizing.Bytes(p.DiskBytes))
	return 0
}
