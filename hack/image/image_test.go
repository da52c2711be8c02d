package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// inspected is what a reader of the tarball finds in it, read the way
// container tools read it: index.json to the manifest to the config and the
// layer, every blob checked against its digest.
type inspected struct {
	name, tag  string // from the index's annotations
	platform   platform
	config     imageConfig
	dockerTags []string
	// files are the layer's entries by path, with their contents.
	files map[string]layerFile
}

type layerFile struct {
	hdr  *tar.Header
	data []byte
}

func inspect(t *testing.T, tarball []byte) *inspected {
	t.Helper()
	entries := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(tarball))
	for {
		hdr, err := tr.Next()
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
		entries[hdr.Name] = data
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		data, ok := entries[blobPath(d)]
		if !ok {
			t.Fatalf("no blob %s", d.Digest)
		}
		if sum := sha256.Sum256(data); "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(data)) != d.Size {
			t.Fatalf("blob %s does not match its descriptor", d.Digest)
		}
		return data
	}
	unmarshal := func(name string, data []byte, into any) {
		t.Helper()
		if err := json.Unmarshal(data, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if string(entries["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", entries["oci-layout"])
	}
	var idx index
	unmarshal("index.json", entries["index.json"], &idx)
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != mediaTypeManifest || idx.Manifests[0].Platform == nil {
		t.Fatalf("index.json = %+v, want one image manifest with its platform", idx)
	}
	var m manifest
	unmarshal("manifest", blob(idx.Manifests[0]), &m)
	if m.Config.MediaType != mediaTypeConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != mediaTypeLayer {
		t.Fatalf("manifest = %+v, want a config and one gzipped layer", m)
	}
	out := &inspected{
		name:     idx.Manifests[0].Annotations["io.containerd.image.name"],
		tag:      idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"],
		platform: *idx.Manifests[0].Platform,
		files:    map[string]layerFile{},
	}
	unmarshal("config", blob(m.Config), &out.config)

	zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	lr := tar.NewReader(io.TeeReader(zr, h))
	for {
		hdr, err := lr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(lr)
		if err != nil {
			t.Fatal(err)
		}
		out.files[hdr.Name] = layerFile{hdr: hdr, data: data}
	}
	if _, err := io.Copy(io.Discard, zr); err != nil { // the tar's end blocks count too
		t.Fatal(err)
	}
	if diffID := "sha256:" + hex.EncodeToString(h.Sum(nil)); !slices.Equal(out.config.RootFS.DiffIDs, []string{diffID}) {
		t.Errorf("config diff_ids = %v, want the layer's %s", out.config.RootFS.DiffIDs, diffID)
	}

	var docker []dockerManifest
	unmarshal("manifest.json", entries["manifest.json"], &docker)
	if len(docker) != 1 || docker[0].Config != blobPath(m.Config) || !slices.Equal(docker[0].Layers, []string{blobPath(m.Layers[0])}) {
		t.Errorf("manifest.json = %+v, does not name the OCI manifest's config and layer", docker)
	} else {
		out.dockerTags = docker[0].RepoTags
	}
	return out
}

// checkRunsKgenctlAsNonRoot checks what the chart relies on: the image runs
// /kgenctl run as a non-root user it names in /etc/passwd.
func checkRunsKgenctlAsNonRoot(t *testing.T, img *inspected) {
	t.Helper()
	c := img.config.Config
	uid, _, _ := strings.Cut(c.User, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("config User = %q, want a numeric non-root user (runAsNonRoot needs a number)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/kgenctl"}) || !slices.Equal(c.Cmd, []string{"run"}) {
		t.Errorf("Entrypoint %q Cmd %q, want [/kgenctl] [run]", c.Entrypoint, c.Cmd)
	}
	if img.config.OS != "linux" || img.config.Architecture != img.platform.Architecture {
		t.Errorf("config platform %s/%s, index %+v", img.config.OS, img.config.Architecture, img.platform)
	}
	bin, ok := img.files["kgenctl"]
	if !ok || bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode&0o111 == 0 {
		t.Fatal("the layer has no executable /kgenctl")
	}
	if !strings.Contains(string(img.files["etc/passwd"].data), ":"+uid+":") {
		t.Errorf("/etc/passwd does not name user %s:\n%s", uid, img.files["etc/passwd"].data)
	}
	if tmp, ok := img.files["tmp/"]; !ok || tmp.hdr.Mode != 0o1777 {
		t.Error("no world-writable /tmp")
	}
}

func TestWrite(t *testing.T) {
	binary := []byte("\x7fELF not really a program")
	img := Image{Binary: binary, Ref: "kgen/kgenctl:1.2.3", Arch: "arm64", Version: "1.2.3"}
	var a, b bytes.Buffer
	if err := Write(&a, img); err != nil {
		t.Fatal(err)
	}
	if err := Write(&b, img); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two writes of the same image differ")
	}
	got := inspect(t, a.Bytes())
	checkRunsKgenctlAsNonRoot(t, got)
	if !bytes.Equal(got.files["kgenctl"].data, binary) {
		t.Error("/kgenctl is not the binary given")
	}
	if got.name != "docker.io/kgen/kgenctl:1.2.3" || got.tag != "1.2.3" || !slices.Equal(got.dockerTags, []string{"kgen/kgenctl:1.2.3"}) {
		t.Errorf("names: containerd %q, OCI %q, Docker %q", got.name, got.tag, got.dockerTags)
	}
	if got.platform.Architecture != "arm64" || got.config.Config.Labels["org.opencontainers.image.version"] != "1.2.3" {
		t.Errorf("platform %+v labels %v", got.platform, got.config.Config.Labels)
	}
	if got.config.Created != "1970-01-01T00:00:00Z" || got.files["kgenctl"].hdr.ModTime.Unix() != 0 {
		t.Errorf("created %s, file time %s; want the Unix epoch", got.config.Created, got.files["kgenctl"].hdr.ModTime)
	}
	if err := Write(io.Discard, Image{Ref: "kgen/kgenctl"}); err == nil {
		t.Error("Write without a binary did not fail")
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		ref, name, tag, err string
	}{
		{ref: "kgenctl", name: "docker.io/library/kgenctl", tag: "latest"},
		{ref: "kgen/kgenctl:0.1.0", name: "docker.io/kgen/kgenctl", tag: "0.1.0"},
		{ref: "registry.example.com:5000/platform/kgenctl:v1", name: "registry.example.com:5000/platform/kgenctl", tag: "v1"},
		{ref: "localhost/kgenctl:Dev", name: "localhost/kgenctl", tag: "Dev"},
		{ref: "Kgen/kgenctl", err: `image reference "Kgen/kgenctl": want [REGISTRY/]REPOSITORY[:TAG]`},
		{ref: "kgen/kgenctl@sha256:00", err: `image reference "kgen/kgenctl@sha256:00": want [REGISTRY/]REPOSITORY[:TAG]`},
		{ref: "kgenctl:", err: `image reference "kgenctl:": want [REGISTRY/]REPOSITORY[:TAG]`},
	}
	for _, tt := range tests {
		t.Run(tt.ref, func(t *testing.T) {
			name, tag, err := normalize(tt.ref)
			if tt.err != "" {
				if err == nil || err.Error() != tt.err {
					t.Fatalf("normalize() error = %v, want %s", err, tt.err)
				}
				return
			}
			if err != nil || name != tt.name || tag != tt.tag {
				t.Errorf("normalize() = %q, %q, %v; want %q, %q", name, tag, err, tt.name, tt.tag)
			}
		})
	}
}

// TestBuiltImage inspects the tarball that 'make image' wrote, which
// $KGEN_IMAGE names ('make image-test' sets it): kgenctl is in it and runs
// as non-root, and, when the image is for this machine, runs at all: a
// static binary needs nothing else from the image.
func TestBuiltImage(t *testing.T) {
	path := os.Getenv("KGEN_IMAGE")
	if path == "" {
		t.Skip("KGEN_IMAGE is not set: run 'make image-test'")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img := inspect(t, data)
	checkRunsKgenctlAsNonRoot(t, img)
	bin := img.files["kgenctl"].data
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) || len(bin) < 1<<20 {
		t.Fatalf("/kgenctl is not a Linux program (%d bytes)", len(bin))
	}
	if img.platform.Architecture != runtime.GOARCH {
		return
	}
	exe := filepath.Join(t.TempDir(), "kgenctl")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("/kgenctl version: %v\n%s", err, out)
	}
	if v := img.config.Config.Labels["org.opencontainers.image.version"]; !strings.Contains(string(out), v) {
		t.Errorf("/kgenctl version says %q, the image's label %q", out, v)
	}
}
