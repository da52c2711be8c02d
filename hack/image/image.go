package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Media types of the OCI image spec.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// nonroot is the user and group the image runs as, as in distroless's
// nonroot images.
const nonroot = 65532

// Image says what to put in the image.
type Image struct {
	// Binary is the static kgenctl executable, put at /kgenctl.
	Binary []byte
	// Ref names the image, such as "kgen/kgenctl:0.1.0".
	Ref string
	// Arch is the GOARCH the binary was built for.
	Arch string
	// Version is kgen's version, for the labels.
	Version string
	// Created is the time recorded in the image; the zero value means the
	// Unix epoch, so that the digest depends only on the binary.
	Created time.Time
}

// descriptor is an OCI content descriptor.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

// imageConfig is the OCI image configuration.
type imageConfig struct {
	Created      string        `json:"created"`
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Config       runConfig     `json:"config"`
	RootFS       rootFS        `json:"rootfs"`
	History      []historyItem `json:"history"`
}

type runConfig struct {
	User       string            `json:"User"`
	Entrypoint []string          `json:"Entrypoint"`
	Cmd        []string          `json:"Cmd"`
	WorkingDir string            `json:"WorkingDir"`
	Env        []string          `json:"Env"`
	Labels     map[string]string `json:"Labels"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type historyItem struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

// dockerManifest is one entry of the manifest.json of 'docker save'.
type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// Write writes the image as a tarball: an OCI image layout (oci-layout,
// index.json, blobs/sha256/...) with Docker's manifest.json beside it.
func Write(w io.Writer, img Image) error {
	if len(img.Binary) == 0 {
		return errors.New("no binary")
	}
	name, tag, err := normalize(img.Ref)
	if err != nil {
		return err
	}
	if img.Created.IsZero() {
		img.Created = time.Unix(0, 0)
	}
	created := img.Created.UTC().Format(time.RFC3339)
	layer, diffID, err := rootLayer(img.Binary, img.Created)
	if err != nil {
		return err
	}
	config, err := json.Marshal(imageConfig{
		Created:      created,
		Architecture: img.Arch,
		OS:           "linux",
		Config: runConfig{
			User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
			Entrypoint: []string{"/kgenctl"},
			Cmd:        []string{"run"},
			WorkingDir: "/",
			Env:        []string{"PATH=/"},
			Labels: map[string]string{
				"org.opencontainers.image.title":       "kgen",
				"org.opencontainers.image.description": "kgen, a generic Kubernetes controller driven by declarative rules",
				"org.opencontainers.image.version":     img.Version,
				"org.opencontainers.image.created":     created,
			},
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{diffID}},
		History: []historyItem{{Created: created, CreatedBy: "hack/image: the static kgenctl binary"}},
	})
	if err != nil {
		return err
	}
	configDesc := blobDescriptor(mediaTypeConfig, config)
	layerDesc := blobDescriptor(mediaTypeLayer, layer)
	m, err := json.Marshal(manifest{SchemaVersion: 2, MediaType: mediaTypeManifest, Config: configDesc, Layers: []descriptor{layerDesc}})
	if err != nil {
		return err
	}
	manifestDesc := blobDescriptor(mediaTypeManifest, m)
	manifestDesc.Platform = &platform{Architecture: img.Arch, OS: "linux"}
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          name + ":" + tag,
		"org.opencontainers.image.ref.name": tag,
	}
	idx, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaTypeIndex, Manifests: []descriptor{manifestDesc}})
	if err != nil {
		return err
	}
	docker, err := json.Marshal([]dockerManifest{{
		Config:   blobPath(configDesc),
		RepoTags: []string{img.Ref},
		Layers:   []string{blobPath(layerDesc)},
	}})
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: img.Created, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	files := []struct {
		name string
		data []byte
	}{
		{blobPath(configDesc), config},
		{blobPath(layerDesc), layer},
		{blobPath(manifestDesc), m},
		{"index.json", idx},
		{"manifest.json", docker},
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
	}
	for _, f := range files {
		if err := writeFile(tw, f.name, 0o644, 0, f.data, img.Created); err != nil {
			return err
		}
	}
	return tw.Close()
}

// rootLayer returns the gzipped layer and the digest of its uncompressed tar
// (the diff ID).
func rootLayer(binary []byte, created time.Time) (layer []byte, diffID string, err error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, "", err
	}
	zw.ModTime = created
	h := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(zw, h))
	for _, d := range []struct {
		name string
		mode int64
		uid  int
	}{{"etc/", 0o755, 0}, {"home/", 0o755, 0}, {"home/nonroot/", 0o700, nonroot}, {"tmp/", 0o1777, 0}} {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, Uid: d.uid, Gid: d.uid, ModTime: created, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, "", err
		}
	}
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", nonroot)},
		{"etc/passwd", 0o644, fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot, nonroot)},
		{"kgenctl", 0o755, binary},
	} {
		if err := writeFile(tw, f.name, f.mode, 0, f.data, created); err != nil {
			return nil, "", err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return gz.Bytes(), "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

func writeFile(tw *tar.Writer, name string, mode int64, uid int, data []byte, mtime time.Time) error {
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Uid: uid, Gid: uid, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func blobDescriptor(mediaType string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	return descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
}

func blobPath(d descriptor) string {
	return "blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:")
}

// normalize splits an image reference into its fully qualified name and
// its tag, as Docker reads it: "kgen/kgenctl:0.1.0" is
// docker.io/kgen/kgenctl, tag 0.1.0; no tag means latest.
func normalize(ref string) (name, tag string, err error) {
	name, tag = ref, "latest"
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		name, tag = ref[:i], ref[i+1:]
	}
	if name == "" || tag == "" || strings.ContainsAny(ref, " @") || strings.ToLower(name) != name {
		return "", "", fmt.Errorf("image reference %q: want [REGISTRY/]REPOSITORY[:TAG]", ref)
	}
	first, _, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		name = "docker.io/library/" + name
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		name = "docker.io/" + name
	}
	return name, tag, nil
}
