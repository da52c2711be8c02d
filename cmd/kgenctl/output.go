package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
)

// outputFlags is -o/--output of a command that prints objects. Its formats
// are kubectl's, printed by k8s.io/cli-runtime's printers (json, yaml,
// kyaml, name, jsonpath=TEMPLATE, jsonpath-as-json=TEMPLATE,
// jsonpath-file=FILE), but not its Go templates (see goTemplateFormats),
// and those the command prints itself (gvk-to-gvr's table, rbac's
// helm-values), which come first and take precedence.
type outputFlags struct {
	format string
	own    []string
}

// addOutputFlag gives cmd -o/--output with a default format and the formats
// cmd prints itself, and returns it. A command that prints objects calls it
// in its constructor, in one line:
//
//	output := addOutputFlag(cmd, "yaml")
//
// and, when it runs, prints the objects with output.printer(), or prints
// them itself when that is nil.
func addOutputFlag(cmd *cobra.Command, defaultFormat string, own ...string) *outputFlags {
	o := &outputFlags{format: defaultFormat, own: own}
	cmd.Flags().StringVarP(&o.format, "output", "o", defaultFormat,
		"output format: "+strings.Join(o.allowed(), ", ")+" (the template formats as FORMAT=TEMPLATE)")
	return o
}

// printer returns cli-runtime's printer for the format, or nil for a
// format the command prints itself. An unknown format is an error listing
// the allowed ones.
func (o *outputFlags) printer() (printers.ResourcePrinter, error) {
	if slices.Contains(o.own, o.format) {
		return nil, nil
	}
	p, err := kubectlPrinter(o.format)
	if errors.Is(err, errUnknownFormat) {
		return nil, fmt.Errorf("unknown output format %q: use one of %s", o.format, strings.Join(o.allowed(), ", "))
	}
	return p, err
}

func (o *outputFlags) allowed() []string {
	formats := slices.Clone(o.own)
	for _, f := range kubectlFormats() {
		if !slices.Contains(formats, f) {
			formats = append(formats, f)
		}
	}
	return formats
}

// kubectl's output formats with a template, as FORMAT=TEMPLATE.
var jsonPathFormats = []string{"jsonpath", "jsonpath-as-json", "jsonpath-file"}

// goTemplateFormats are kubectl's formats of a Go template, which kgenctl
// refuses (errGoTemplate). A binary that can execute a text/template
// keeps every exported method of every type it uses through an interface,
// since the linker cannot tell which one a template calls: kgenctl, which
// is also the operator, was 94 MB instead of 58 with them, and an idle
// 'kgenctl run' had 13 MiB more of it in memory (TestNoReflectMethod keeps
// it so).
var goTemplateFormats = []string{"go-template", "go-template-file", "template", "templatefile"}

// errGoTemplate is kubectlPrinter's error for a Go template format: it
// names the jsonpath format to use instead.
func errGoTemplate(format string) error {
	instead := "jsonpath=TEMPLATE"
	if strings.HasSuffix(format, "file") {
		instead = "jsonpath-file=FILE"
	}
	return fmt.Errorf("output format %q: kgenctl prints no Go templates (they would make its binary, which is also the operator's, 60%% larger); use %s", format, instead)
}

// errUnknownFormat is kubectlPrinter's error for a format it does not know.
var errUnknownFormat = errors.New("unknown output format")

// kubectlFormats returns kubectl's output formats, in the order kubectl
// lists them: kyaml is left out if $KUBECTL_KYAML is false, as kubectl
// does.
func kubectlFormats() []string {
	formats := []string{"json", "yaml"}
	if strings.ToLower(os.Getenv("KUBECTL_KYAML")) != "false" {
		formats = append(formats, "kyaml")
	}
	formats = append(formats, "name")
	return append(formats, jsonPathFormats...)
}

// kubectlPrinter returns the printer of cli-runtime's printers package for
// one of kubectl's output formats, set up as kubectl sets it up with its
// default flags (cli-runtime's genericclioptions.PrintFlags, which kgenctl
// does not import: see kubeFlags): json, yaml, kyaml and name compare
// without regard to case; json, yaml and kyaml leave managedFields out
// (there is no --show-managed-fields); an empty format prints names, as
// kubectl's name printer does; templates allow missing keys (there is no
// --allow-missing-template-keys). The errors for a template are kubectl's,
// down to naming --template for a file it cannot read. A Go template is
// refused (errGoTemplate).
func kubectlPrinter(format string) (printers.ResourcePrinter, error) {
	switch lower := strings.ToLower(format); {
	case lower == "json":
		return &printers.OmitManagedFieldsPrinter{Delegate: &printers.JSONPrinter{}}, nil
	case lower == "yaml":
		return &printers.OmitManagedFieldsPrinter{Delegate: &printers.YAMLPrinter{}}, nil
	case lower == "kyaml" && slices.Contains(kubectlFormats(), lower):
		return &printers.OmitManagedFieldsPrinter{Delegate: &printers.KYAMLPrinter{}}, nil
	case lower == "name" || lower == "":
		return &printers.NamePrinter{ShortOutput: lower == "name"}, nil
	}
	name, template, _ := strings.Cut(format, "=")
	if slices.Contains(goTemplateFormats, name) {
		return nil, errGoTemplate(name)
	}
	if !slices.Contains(jsonPathFormats, name) {
		return nil, errUnknownFormat
	}
	if template == "" {
		return nil, errors.New("template format specified but no template given")
	}
	if name == "jsonpath-file" {
		data, err := os.ReadFile(template)
		if err != nil {
			return nil, fmt.Errorf("error reading --template %s, %w", template, err)
		}
		template = string(data)
	}
	p, err := printers.NewJSONPathPrinter(template)
	if err != nil {
		return nil, fmt.Errorf("error parsing jsonpath %s, %w", template, err)
	}
	p.AllowMissingKeys(true)
	p.EnableJSONOutput(name == "jsonpath-as-json")
	return p, nil
}

// printObjects prints objects as a YAML stream for -o yaml, and as one v1
// List for every other format, as kubectl prints several objects.
func printObjects(out io.Writer, format string, p printers.ResourcePrinter, objs []unstructured.Unstructured) error {
	if format == "yaml" {
		for i := range objs {
			if err := p.PrintObj(&objs[i], out); err != nil {
				return err
			}
		}
		return nil
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List"}, Items: objs}
	return p.PrintObj(list, out)
}
