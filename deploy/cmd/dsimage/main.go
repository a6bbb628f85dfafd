// Command dsimage builds dedupstream's OCI image without a container daemon
// (make image runs it): it compiles a static cmd/dedupstream, adds the base
// files (see package ociimage) and writes an OCI image layout and a
// `docker load` tarball.
//
//	go run ./cmd/dsimage -module .. -out ../bin/image -version v1.2.3 \
//	    -revision $(git rev-parse HEAD) -source URL -licenses SPDX
//
// Exit 0 with the image's digest and tag on stdout; 2 on usage errors; 1
// when the build fails.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/dedupstream/dedupstream/deploy/ociimage"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dsimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o ociimage.Options
	out := fs.String("out", "bin/image", "output directory: dedupstream (the binary), oci/ (OCI image layout), dedupstream.tar (docker load)")
	created := fs.String("created", "0", "creation time and every file's time, Unix seconds (make image passes the commit time)")
	fs.StringVar(&o.Module, "module", "..", "root of the dedupstream module")
	fs.StringVar(&o.Version, "version", "", "version stamped into the binary and labelled (required)")
	fs.StringVar(&o.Revision, "revision", "", "VCS revision label (required)")
	fs.StringVar(&o.Source, "source", "", "source repository URL label (required)")
	fs.StringVar(&o.Licenses, "licenses", "", "SPDX licence expression label (required)")
	fs.StringVar(&o.CABundle, "ca", ociimage.CABundle, "PEM CA bundle copied into the image")
	fs.StringVar(&o.Arch, "arch", "amd64", "GOARCH of the binary and the image")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "dsimage: -created: want Unix seconds, got %q\n", *created)
		return 2
	}
	o.Created = time.Unix(secs, 0)
	if o.Version == "" || o.Revision == "" || o.Source == "" || o.Licenses == "" {
		fmt.Fprintln(stderr, "dsimage: -version, -revision, -source and -licenses are required")
		fs.Usage()
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(stderr, "dsimage:", err)
		return 1
	}
	if abs, err := filepath.Abs(*out); err == nil {
		*out = abs
	}
	o.Binary = filepath.Join(*out, "dedupstream")
	res, err := ociimage.Make(context.Background(), o, *out)
	if err != nil {
		fmt.Fprintln(stderr, "dsimage:", err)
		return 1
	}
	fmt.Fprintf(stdout, "image %s %s\n  OCI layout: %s\n  docker load -i %s\n", res.Tag, res.Digest, res.Layout, res.Tarball)
	return 0
}
