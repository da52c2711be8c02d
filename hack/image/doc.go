// Command image writes kgen's container image as a tarball without a
// container engine: the static kgenctl binary as the one layer (with
// /etc/passwd and /etc/group naming the nonroot user 65532, and a /tmp),
// a config that runs /kgenctl run as 65532:65532, in an OCI image layout
// that also carries Docker's manifest.json, so that 'docker load',
// 'podman load', 'kind load image-archive', 'ctr images import' and
// 'skopeo copy oci-archive:...' all read it.
//
//	go run ./hack/image -binary bin/linux_amd64/kgenctl -ref kgen/kgenctl:0.1.0 -o bin/kgen-image.tar
//
// It uses only the standard library, and its output depends only on its
// inputs (fixed timestamps and file order), so the same binary gives the
// same image digest.
package main
