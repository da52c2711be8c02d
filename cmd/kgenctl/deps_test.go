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

// kgenctl's linker never sees a call of reflect's Method or MethodByName
// with a name it cannot know, which makes it keep every exported method
// of every type used through an interface: text/template's execution does
// that, reached from kubectl's Go template printer and from gRPC (through
// k8s.io/apiserver's delegating authenticator and authorizer). With them
// kgenctl was 94 MB instead of 58, and an idle 'kgenctl run' had 13 MiB
// more of its binary in memory. The failure names the path from main to
// the first such call.
func TestNoReflectMethod(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kgenctl")
	}
	var deps bytes.Buffer
	cmd := exec.Command("go", "build", "-ldflags=-dumpdep", "-o", t.TempDir()+"/kgenctl", ".")
	cmd.Stderr = &deps
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build: %v\n%s", err, deps.Bytes()[:min(deps.Len(), 2000)])
	}
	// Each line: "from -> to", a symbol that makes another reachable; the
	// linker marks a function that calls Method by an unknown name
	// <ReflectMethod>.
	from := map[string]string{}
	var culprit string
	for line := range strings.Lines(deps.String()) {
		a, b, ok := strings.Cut(strings.TrimSpace(line), " -> ")
		if !ok {
			continue
		}
		name := func(s string) string {
			return strings.TrimSuffix(strings.TrimSuffix(s, " <ReflectMethod>"), " <UsedInIface>")
		}
		if _, seen := from[name(b)]; !seen {
			from[name(b)] = name(a)
		}
		if culprit == "" && strings.HasSuffix(b, " <ReflectMethod>") {
			culprit = name(b)
		}
	}
	if culprit == "" {
		return
	}
	path := []string{culprit}
	for sym := culprit; len(path) < 40; {
		next, ok := from[sym]
		if !ok || slices.Contains(path, next) {
			break
		}
		path, sym = append(path, next), next
	}
	slices.Reverse(path)
	t.Errorf("kgenctl reaches %s, which calls a method by a name the linker cannot know; reached by:\n  %s", culprit, strings.Join(path, "\n  "))
}
