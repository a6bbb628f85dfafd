package ociimage_test

import (
	"archive/tar"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/dedupstream/dedupstream/deploy/manifests"
	"github.com/dedupstream/dedupstream/deploy/ociimage"
)

const testVersion = "v0.0.0-imagetest+1"

func opts(out string) ociimage.Options {
	return ociimage.Options{
		Module:   "../..",
		Binary:   filepath.Join(out, "dedupstream"),
		Version:  testVersion,
		Revision: "0123456789abcdef0123456789abcdef01234567",
		Source:   "https://github.com/dedupstream/dedupstream",
		Licenses: "NOASSERTION",
		Created:  time.Unix(1_800_000_000, 0),
	}
}

// entry is one file of the image's merged filesystem.
type entry struct {
	hdr  *tar.Header
	data []byte
}

func files(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]entry{}
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil || mt != types.OCILayer {
			t.Errorf("layer media type %v (%v), want %s", mt, err, types.OCILayer)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out["/"+strings.TrimSuffix(h.Name, "/")] = entry{h, data}
		}
		rc.Close()
	}
	return out
}

// TestImage builds the image as make image does, reads it back from the
// OCI layout and from the docker tarball, checks its config and files, and
// runs the binary it holds: version, and lint of the shipped job configs.
func TestImage(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res, err := ociimage.Make(ctx, opts(out), out)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Tag.String(); got != "index.docker.io/library/dedupstream:v0.0.0-imagetest-1" && got != "dedupstream:v0.0.0-imagetest-1" {
		t.Errorf("tag %q", got)
	}

	// The OCI layout: one image, named by its tag.
	idx, err := layout.ImageIndexFromPath(res.Layout)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != res.Tag.TagStr() {
		t.Fatalf("layout index: %+v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	if d, _ := img.Digest(); d != res.Digest {
		t.Errorf("layout holds %s, Make reported %s", d, res.Digest)
	}

	// The tarball: the same image, under the tag docker load gives it.
	tag, _ := name.NewTag(res.Tag.String())
	timg, err := tarball.ImageFromPath(res.Tarball, &tag)
	if err != nil {
		t.Fatal(err)
	}
	// docker's format has no manifest of its own (it is rebuilt on load),
	// so compare what docker keeps: the config and the layers' contents.
	lc, _ := img.ConfigName()
	tc, _ := timg.ConfigName()
	ld, _ := img.ConfigFile()
	td, _ := timg.ConfigFile()
	if lc != tc || !slices.Equal(ld.RootFS.DiffIDs, td.RootFS.DiffIDs) {
		t.Errorf("tarball config %s, layout config %s", tc, lc)
	}
	checkDockerManifest(t, res.Tarball, res.Tag.String())

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cf.Config.User)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/dedupstream"}) {
		t.Errorf("entrypoint %q", cf.Config.Entrypoint)
	}
	if !slices.Equal(cf.Config.Cmd, []string{"run", "--config", "/etc/dedupstream/job.yaml"}) {
		t.Errorf("cmd %q", cf.Config.Cmd)
	}
	o := opts(out)
	for k, want := range map[string]string{
		ociimage.LabelVersion:  o.Version,
		ociimage.LabelRevision: o.Revision,
		ociimage.LabelSource:   o.Source,
		ociimage.LabelLicenses: o.Licenses,
		ociimage.LabelCreated:  "2027-01-15T08:00:00Z",
		ociimage.LabelTitle:    "dedupstream",
	} {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	if _, ok := cf.Config.ExposedPorts["9464/tcp"]; !ok {
		t.Errorf("exposed ports %v", cf.Config.ExposedPorts)
	}

	// The files.
	layers, _ := img.Layers()
	if len(layers) != 2 {
		t.Errorf("want 2 layers (base, app), got %d", len(layers))
	}
	fs := files(t, img)
	bin, ok := fs["/usr/local/bin/dedupstream"]
	if !ok || bin.hdr.Mode&0o111 == 0 || bin.hdr.Uid != 0 {
		t.Fatalf("binary missing or not executable root-owned: %+v", bin.hdr)
	}
	if p := string(fs["/etc/passwd"].data); !strings.Contains(p, "dedupstream:x:65532:65532:") {
		t.Errorf("/etc/passwd has no user 65532:\n%s", p)
	}
	if g := string(fs["/etc/group"].data); !strings.Contains(g, "dedupstream:x:65532:") {
		t.Errorf("/etc/group has no group 65532:\n%s", g)
	}
	if n := certs(fs["/etc/ssl/certs/ca-certificates.crt"].data); n < 10 {
		t.Errorf("CA bundle holds %d certificates", n)
	}
	for _, d := range []string{"/var/lib/dedupstream", "/etc/dedupstream"} {
		if h := fs[d].hdr; h == nil || h.Typeflag != tar.TypeDir || h.Uid != 65532 {
			t.Errorf("%s: want a directory owned by 65532, got %+v", d, h)
		}
	}
	if h := fs["/tmp"].hdr; h == nil || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp: want mode 1777, got %+v", h)
	}
	for p, e := range fs {
		if !e.hdr.ModTime.Equal(o.Created) {
			t.Errorf("%s: mtime %v, want %v", p, e.hdr.ModTime, o.Created)
			break
		}
	}

	// Run what the image holds.
	exe := filepath.Join(t.TempDir(), "dedupstream")
	if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "dedupstream "+testVersion+" ") {
		t.Errorf("dedupstream version: %q, %v", v, err)
	}
	for _, dir := range []string{"../kubernetes", "../kubernetes/static"} {
		s, err := manifests.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		sts := manifests.All[*appsv1.StatefulSet](s)[0]
		for i := range int(*sts.Spec.Replicas) {
			path, env, err := s.PodConfig(sts, i, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, "lint", path)
			cmd.Env = []string{}
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			if b, err := cmd.CombinedOutput(); err != nil || !strings.HasSuffix(strings.TrimSpace(string(b)), ": ok") {
				t.Errorf("%s pod %d: dedupstream lint: %v\n%s", dir, i, err, b)
			}
			// Without the Secret's variable the same file must not pass:
			// the lint above really read it.
			cmd = exec.Command(exe, "lint", path)
			cmd.Env = []string{"POD_NAME=" + env["POD_NAME"]}
			if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "KAFKA_PASSWORD") {
				t.Errorf("%s pod %d: lint without KAFKA_PASSWORD passed: %s", dir, i, b)
			}
		}
	}

	// Same inputs, same image.
	again, err := ociimage.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := again.Digest(); d != res.Digest {
		t.Errorf("rebuild from the same binary gave %s, first build %s", d, res.Digest)
	}
}

func checkDockerManifest(t *testing.T, path, tag string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no manifest.json in the tarball: %v", err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var m []struct {
			Config   string
			RepoTags []string
			Layers   []string
		}
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			t.Fatal(err)
		}
		if len(m) != 1 || !slices.Contains(m[0].RepoTags, tag) || len(m[0].Layers) != 2 {
			t.Errorf("docker manifest.json: %+v, want RepoTags [%s] and 2 layers", m, tag)
		}
		return
	}
}

func certs(pemData []byte) int {
	n := 0
	for {
		var b *pem.Block
		b, pemData = pem.Decode(pemData)
		if b == nil {
			return n
		}
		if _, err := x509.ParseCertificate(b.Bytes); err == nil {
			n++
		}
	}
}

// TestBuildRefusesDynamicBinary: a cgo build would not start in an image
// without libc; Build says so instead of producing it.
func TestBuildRefusesDynamicBinary(t *testing.T) {
	o := opts(t.TempDir())
	o.Binary = "/bin/sh"
	if _, err := ociimage.Build(o); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Fatalf("Build of a dynamic binary: %v", err)
	}
	o.Binary = "/bin/sh"
	o.Licenses = ""
	if _, err := ociimage.Build(o); err == nil || !strings.Contains(err.Error(), "licenses: required") {
		t.Fatalf("Build without a licence label: %v", err)
	}
}

func TestTag(t *testing.T) {
	for v, want := range map[string]string{
		"v1.2.3":              "v1.2.3",
		"v0.0.0-1-gabc+dirty": "v0.0.0-1-gabc-dirty",
		"(devel)":             "devel-",
		"":                    "latest",
	} {
		tag, err := ociimage.Tag(v)
		if err != nil || tag.TagStr() != want {
			t.Errorf("Tag(%q) = %v, %v; want %s", v, tag, err, want)
		}
	}
}
