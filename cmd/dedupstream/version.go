package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise the module version from the build info is printed.
var version = ""

// buildVersion is the version alone: the -ldflags value, else the module
// version, else "(devel)".
func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func versionString() string {
	return fmt.Sprintf("dedupstream %s %s %s/%s", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("version", "version\n\nPrint the version and the Go toolchain that built it.", stdout, stderr)
	if code, done := parse(fs, args, stdout); done {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dedupstream version: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	fmt.Fprintln(stdout, versionString())
	return exitOK
}
