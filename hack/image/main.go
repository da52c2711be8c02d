package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run() error {
	binary := flag.String("binary", "", "the static linux kgenctl binary to put at /kgenctl")
	out := flag.String("o", "bin/kgen-image.tar", "the image tarball to write")
	ref := flag.String("ref", "kgen/kgenctl:dev", "the image's name and tag")
	arch := flag.String("arch", runtime.GOARCH, "the GOARCH the binary was built for")
	version := flag.String("version", "dev", "kgen's version, for the image's labels")
	flag.Parse()
	if *binary == "" {
		return errors.New("-binary is required")
	}
	data, err := os.ReadFile(*binary)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(data, []byte("\x7fELF")) {
		return fmt.Errorf("%s is not a Linux executable", *binary)
	}
	var buf bytes.Buffer
	if err := Write(&buf, Image{Binary: data, Ref: *ref, Arch: *arch, Version: *version}); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	// Write then rename, so a failed run leaves no half image behind.
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	fmt.Printf("wrote %s (%s, %d MiB)\n", *out, *ref, buf.Len()>>20)
	return nil
}
