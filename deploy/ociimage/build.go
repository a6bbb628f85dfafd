package ociimage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The paths and identity the image and deploy/kubernetes agree on.
const (
	BinaryPath = "/usr/local/bin/dedupstream"
	ConfigDir  = "/etc/dedupstream"
	StateDir   = "/var/lib/dedupstream"
	CABundle   = "/etc/ssl/certs/ca-certificates.crt"
	UID        = 65532
	GID        = 65532
	UserName   = "dedupstream"
	// MetricsPort is exposed by the image; deploy/kubernetes sets
	// metrics.listen to 0.0.0.0 on it.
	MetricsPort = 9464
)

// Label keys of the OCI image spec's annotations, set as config labels.
const (
	LabelTitle    = "org.opencontainers.image.title"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
	LabelCreated  = "org.opencontainers.image.created"
)

// Options describe one image build. Version, Revision, Source and Licenses
// are required: they become labels, and Version is stamped into the binary.
type Options struct {
	// Module is the root of the dedupstream module (the directory holding
	// cmd/dedupstream). Required by Make, which compiles the binary.
	Module string
	// Binary is a static linux dedupstream binary; Make writes it here.
	Binary string
	// Version is stamped into the binary (main.version) and labelled.
	Version string
	// Revision is the VCS commit the image is built from.
	Revision string
	// Source is the repository URL.
	Source string
	// Licenses is an SPDX expression.
	Licenses string
	// Created is the image's creation time and every file's time. The
	// default value is the Unix epoch, so builds are reproducible.
	Created time.Time
	// CABundle is the PEM bundle copied to /etc/ssl/certs. The default
	// value is the building machine's /etc/ssl/certs/ca-certificates.crt
	// (Debian's ca-certificates package).
	CABundle string
	// Arch is the GOARCH the binary is built for and the image declares.
	// The default value is amd64.
	Arch string
}

func (o *Options) applyDefaults() {
	if o.CABundle == "" {
		o.CABundle = CABundle
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0)
	}
	o.Created = o.Created.UTC()
}

func (o *Options) validate() error {
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"binary", o.Binary}, {"version", o.Version}, {"revision", o.Revision},
		{"source", o.Source}, {"licenses", o.Licenses},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("ociimage: %s: required", f.name))
		}
	}
	return errors.Join(errs...)
}

// CompileBinary builds cmd/dedupstream of the module at o.Module into
// o.Binary the way the image needs it: CGO off (a static binary for an
// image without libc), -trimpath (no build machine paths), version stamped
// with -X main.version, symbol tables stripped, and the VCS revision
// stamped by the go command when the module is a git checkout.
func CompileBinary(ctx context.Context, o Options) error {
	o.applyDefaults()
	if o.Module == "" || o.Binary == "" || o.Version == "" {
		return errors.New("ociimage: module, binary and version are required to compile")
	}
	out, err := filepath.Abs(o.Binary)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=auto",
		"-ldflags", "-s -w -X main.version="+o.Version, "-o", out, "./cmd/dedupstream")
	cmd.Dir = o.Module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+o.Arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("ociimage: go build ./cmd/dedupstream in %s: %w\n%s", o.Module, err, b)
	}
	return nil
}

// Build assembles the image from o.Binary and the base files.
func Build(o Options) (v1.Image, error) {
	o.applyDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(o.CABundle)
	if err != nil {
		return nil, fmt.Errorf("ociimage: CA bundle: %w (install the ca-certificates package, or pass another PEM bundle)", err)
	}
	if !bytes.Contains(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("ociimage: CA bundle %s holds no PEM certificate", o.CABundle)
	}
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, fmt.Errorf("ociimage: binary: %w", err)
	}
	if err := checkStatic(o.Binary); err != nil {
		return nil, err
	}

	base, err := layer(o.Created, baseFiles(ca))
	if err != nil {
		return nil, err
	}
	app, err := layer(o.Created, []file{{path: BinaryPath, mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "ociimage: base files (passwd, group, CA bundle, directories)", Comment: "built from files, no parent image"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "ociimage: " + BinaryPath + " " + o.Version}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Created = v1.Time{Time: o.Created}
	cf.Author = ""
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint:   []string{BinaryPath},
		Cmd:          []string{"run", "--config", ConfigDir + "/job.yaml"},
		WorkingDir:   StateDir,
		Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CABundle},
		ExposedPorts: map[string]struct{}{fmt.Sprintf("%d/tcp", MetricsPort): {}},
		Volumes:      map[string]struct{}{StateDir: {}},
		StopSignal:   "SIGTERM",
		Labels: map[string]string{
			LabelTitle:    "dedupstream",
			LabelVersion:  o.Version,
			LabelRevision: o.Revision,
			LabelSource:   o.Source,
			LabelLicenses: o.Licenses,
			LabelCreated:  o.Created.Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// Tag is the reference the tarball and the layout name the image by:
// dedupstream:<version>, with characters a tag may not hold replaced by
// '-' (a tag is [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}).
func Tag(version string) (name.Tag, error) {
	t := badTagChars.ReplaceAllString(version, "-")
	t = strings.TrimLeft(t, ".-")
	if len(t) > 128 {
		t = t[:128]
	}
	if t == "" {
		t = "latest"
	}
	return name.NewTag("dedupstream:"+t, name.WeakValidation)
}

var badTagChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// WriteLayout writes img as an OCI image layout in dir (created or
// replaced), its manifest annotated with the tag as ref.name, which is what
// `skopeo copy oci:DIR:TAG` and `crane push --index`-style tools look for.
func WriteLayout(dir string, img v1.Image, tag name.Tag) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("ociimage: layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(),
	})); err != nil {
		return fmt.Errorf("ociimage: layout %s: %w", dir, err)
	}
	return nil
}

// WriteTarball writes img as a `docker load` tarball (manifest.json with
// RepoTags) at path; `crane push PATH REF` accepts it too.
func WriteTarball(path string, img v1.Image, tag name.Tag) error {
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("ociimage: tarball %s: %w", path, err)
	}
	return nil
}

type file struct {
	path string // absolute, without trailing slash
	dir  bool
	mode int64
	uid  int
	gid  int
	data []byte
}

func baseFiles(ca []byte) []file {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", UserName, UID, GID, UserName, StateDir)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, GID)
	return []file{
		{path: "/etc", dir: true, mode: 0o755},
		{path: "/etc/passwd", mode: 0o644, data: []byte(passwd)},
		{path: "/etc/group", mode: 0o644, data: []byte(group)},
		{path: "/etc/ssl", dir: true, mode: 0o755},
		{path: "/etc/ssl/certs", dir: true, mode: 0o755},
		{path: CABundle, mode: 0o644, data: ca},
		{path: ConfigDir, dir: true, mode: 0o755, uid: UID, gid: GID},
		{path: "/tmp", dir: true, mode: 0o1777},
		{path: "/usr", dir: true, mode: 0o755},
		{path: "/usr/local", dir: true, mode: 0o755},
		{path: "/usr/local/bin", dir: true, mode: 0o755},
		{path: "/var", dir: true, mode: 0o755},
		{path: "/var/lib", dir: true, mode: 0o755},
		{path: StateDir, dir: true, mode: 0o750, uid: UID, gid: GID},
	}
}

// layer writes files as one tar layer (OCI media type, gzip).
func layer(mtime time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(f.path, "/"),
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// Result names what Make wrote.
type Result struct {
	Tag     name.Tag
	Digest  v1.Hash
	Layout  string // OCI image layout directory
	Tarball string // docker load tarball
}

// Make is what `make image` does: CompileBinary, Build, then WriteLayout to
// out/oci and WriteTarball to out/dedupstream.tar.
func Make(ctx context.Context, o Options, out string) (Result, error) {
	if err := CompileBinary(ctx, o); err != nil {
		return Result{}, err
	}
	img, err := Build(o)
	if err != nil {
		return Result{}, err
	}
	tag, err := Tag(o.Version)
	if err != nil {
		return Result{}, err
	}
	res := Result{Tag: tag, Layout: filepath.Join(out, "oci"), Tarball: filepath.Join(out, "dedupstream.tar")}
	if res.Digest, err = img.Digest(); err != nil {
		return Result{}, err
	}
	if err := WriteLayout(res.Layout, img, tag); err != nil {
		return Result{}, err
	}
	if err := WriteTarball(res.Tarball, img, tag); err != nil {
		return Result{}, err
	}
	return res, nil
}
