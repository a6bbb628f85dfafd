package ociimage

import (
	"debug/elf"
	"fmt"
)

// checkStatic refuses a binary that needs a dynamic loader or shared
// libraries: the image has neither (a cgo build would start with "no such
// file or directory", naming the binary, which misleads).
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("ociimage: %s is not a linux ELF binary: %w (build it with GOOS=linux)", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("ociimage: %s is dynamically linked (it asks for a program interpreter): build it with CGO_ENABLED=0", path)
		}
	}
	libs, err := f.ImportedLibraries()
	if err == nil && len(libs) > 0 {
		return fmt.Errorf("ociimage: %s needs shared libraries %v: build it with CGO_ENABLED=0", path, libs)
	}
	return nil
}
