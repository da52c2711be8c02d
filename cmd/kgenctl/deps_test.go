package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// No binary of the module links cli-runtime's genericclioptions or
// resource packages, kustomize, or Go's plugin package. They come in
// together (genericclioptions imports resource, resource imports
// kustomize, kustomize imports plugin), and plugin makes the linker keep
// and export every symbol: kgenctl was 115 MB instead of 87 MB, and idled
// with 8 MiB more RSS. See kubeFlags and kubectlPrinter for what kgenctl
// uses instead.
func TestNoHeavyDependencies(t *testing.T) {
	mains := goList(t, "-f", `{{if eq .Name "main"}}{{.ImportPath}}{{end}}`, "kgen.dev/kgen/...")
	if !slices.Contains(mains, "kgen.dev/kgen/cmd/kgenctl") {
		t.Fatalf("go list found the main packages %v, without kgen.dev/kgen/cmd/kgenctl", mains)
	}
	forbidden := func(pkg string) bool {
		return pkg == "plugin" ||
			pkg == "k8s.io/cli-runtime/pkg/genericclioptions" ||
			strings.HasPrefix(pkg, "k8s.io/cli-runtime/pkg/resource") ||
			strings.HasPrefix(pkg, "sigs.k8s.io/kustomize/")
	}
	for _, main := range mains {
		t.Run(main, func(t *testing.T) {
			// Each line: a package of main's build, then what it imports.
			for _, line := range goList(t, "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, main) {
				pkg, imports, _ := strings.Cut(line, " ")
				if forbidden(pkg) {
					continue // its importer is reported
				}
				for imp := range strings.FieldsSeq(imports) {
					if forbidden(imp) {
						t.Errorf("%s imports %s", pkg, imp)
					}
				}
			}
		})
	}
}

// goList runs go list with args and returns its non-empty output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return slices.DeleteFunc(strings.Split(string(out), "\n"), func(s string) bool { return s == "" })
}
