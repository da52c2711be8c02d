package main

import (
	"errors"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/rules"
)

type crdOptions struct {
	rules  []string
	output *outputFlags
}

func newCRDCmd(out io.Writer) *cobra.Command {
	o := &crdOptions{}
	cmd := &cobra.Command{
		Use:   "crd --rules PATH",
		Short: "Print the CustomResourceDefinitions of the parent kinds the rules describe",
		Long: `Print, for every rule with spec.parent.schema, the CustomResourceDefinition
of its parent kind: the spec's schema from the short form, a status
subresource, and a status schema with observedGeneration, the conditions
and the rule's status fields. No cluster is needed.

The CRD is namespaced unless the rule says spec.parent.scope: Cluster; its
plural is the kind in lower case made plural by English rules. Apply it
with kubectl apply -f, or let "kgenctl run --manage-crds" do it.`,
		Example: `  kgenctl crd --rules examples/regions/rules.yaml
  kgenctl crd --rules rules/ | kubectl apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return o.run(out)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "a rules file or directory (repeatable)")
	o.output = addOutputFlag(cmd, "yaml")
	_ = cmd.MarkFlagRequired("rules")
	return cmd
}

func (o *crdOptions) run(out io.Writer) error {
	printer, err := o.output.printer()
	if err != nil {
		return err
	}
	loaded, err := rules.Load(o.rules, rules.Options{})
	if err != nil {
		return err
	}
	if errs := rules.CheckCRDs(loaded); len(errs) > 0 {
		return errs
	}
	var crds []unstructured.Unstructured
	for _, r := range loaded {
		if r.Parent.Schema == nil {
			continue
		}
		crd, err := r.CRD()
		if err != nil {
			return err
		}
		crds = append(crds, *crd)
	}
	if len(crds) == 0 {
		return errors.New("no rule has spec.parent.schema: write the CustomResourceDefinition of a parent kind yourself, or describe its spec there")
	}
	return printObjects(out, o.output.format, printer, crds)
}
