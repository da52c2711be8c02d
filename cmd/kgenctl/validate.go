package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"kgen.dev/kgen/rules"
)

type validateOptions struct {
	rules []string
	crds  []string
}

func newValidateCmd(out io.Writer) *cobra.Command {
	o := &validateOptions{}
	cmd := &cobra.Command{
		Use:   "validate --rules PATH [--rules PATH ...]",
		Short: "Check rules without a cluster, listing every error",
		Long: `Load the rules as "kgenctl run" would, without contacting a cluster: decode every
document strictly, compile and type-check every expression, and check names,
ids, selectors, the namespace policy and the children's dependencies.

PATH is a file, or a directory whose *.yaml and *.yml files are read. Every
error is listed with its file, line and column; the exit code is 0 when the
rules are valid and 1 otherwise.

With --crd, every parent.… path is checked against the schema the parent's
CustomResourceDefinition declares, as "kgenctl run" does with the CRD the
cluster serves; a rule's spec.parent.schema is used the same way. The
template of a child whose kind's CRD is given is checked against it: its
fields, and the types of the values that fill them. (kgenctl run checks
every child against the schemas the cluster publishes.)`,
		Example: `  kgenctl validate --rules examples/webapp/rules.yaml
  kgenctl validate --rules rules/ --rules more-rules.yaml
  kgenctl validate --rules examples/webapp/rules.yaml --crd examples/webapp/crd.yaml`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return o.run(out)
		},
	}
	cmd.Flags().StringArrayVar(&o.rules, "rules", nil, "a rules file or directory (repeatable)")
	cmd.Flags().StringArrayVar(&o.crds, "crd", nil, "a file of CustomResourceDefinitions whose schemas type-check expressions (repeatable)")
	_ = cmd.MarkFlagRequired("rules")
	return cmd
}

func (o *validateOptions) run(out io.Writer) error {
	scope, err := readCRDs(o.crds)
	if err != nil {
		return err
	}
	loaded, err := rules.Load(o.rules, rules.Options{Schemas: scope.Schema})
	if err != nil {
		var list rules.ErrorList
		if errors.As(err, &list) {
			noun := "errors"
			if len(list) == 1 {
				noun = "error"
			}
			return fmt.Errorf("the rules have %d %s:\n%s", len(list), noun, list.Error())
		}
		return err
	}
	names := make([]string, len(loaded))
	for i, r := range loaded {
		names[i] = r.Name
	}
	noun := "rules are"
	if len(loaded) == 1 {
		noun = "rule is"
	}
	_, err = fmt.Fprintf(out, "%d %s valid: %s\n", len(loaded), noun, strings.Join(names, ", "))
	return err
}
