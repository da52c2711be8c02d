package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
)

// outputFlags is -o/--output of a command that prints objects. Its formats
// are kubectl's, printed by k8s.io/cli-runtime's printers (json, yaml,
// kyaml, name, jsonpath=TEMPLATE, jsonpath-as-json=TEMPLATE,
// jsonpath-file=FILE, go-template=TEMPLATE, go-template-file=FILE), and
// those the command prints itself (gvk-to-gvr's table, rbac's
// helm-values), which come first and take precedence.
type outputFlags struct {
	format string
	own    []string
	print  *genericclioptions.PrintFlags
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
	o := &outputFlags{format: defaultFormat, own: own, print: genericclioptions.NewPrintFlags("")}
	o.print.OutputFormat = &o.format
	// Only -o chooses the printer: kgenctl has no --template flag.
	o.print.OutputFlagSpecified = func() bool { return true }
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
	p, err := o.print.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return nil, fmt.Errorf("unknown output format %q: use one of %s", o.format, strings.Join(o.allowed(), ", "))
	}
	return p, err
}

func (o *outputFlags) allowed() []string {
	formats := slices.Clone(o.own)
	for _, f := range o.print.AllowedFormats() {
		if !slices.Contains(formats, f) {
			formats = append(formats, f)
		}
	}
	return formats
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
