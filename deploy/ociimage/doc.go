// Package ociimage builds dedupstream's container image without a container
// daemon: a static dedupstream binary (CGO off, -trimpath, version stamped)
// on a base made from files, written as an OCI image layout and as a tarball
// that `docker load` and `crane push` accept.
//
// # Layers
//
// The image has two layers and no parent image (nothing is pulled):
//
//   - base: /etc/passwd and /etc/group naming root and the user dedupstream
//     (uid and gid 65532), the CA bundle at /etc/ssl/certs/ca-certificates.crt
//     (copied from the building machine, see Options.CABundle), /tmp (1777),
//     /etc/dedupstream and /var/lib/dedupstream owned by the user;
//   - app: /usr/local/bin/dedupstream (0755).
//
// Every file's time is Options.Created (make image uses the commit time), so
// building the same commit on the same machine gives the same layer digests.
//
// # Config
//
// User 65532:65532, entrypoint /usr/local/bin/dedupstream, command
// `run --config /etc/dedupstream/job.yaml`, SSL_CERT_FILE set, port 9464/tcp
// exposed (metrics.listen in deploy/kubernetes), and the OCI labels
// org.opencontainers.image.{title,version,revision,source,licenses,created}.
package ociimage
