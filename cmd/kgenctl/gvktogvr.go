package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/mapper"
)

type gvkToGVROptions struct {
	output string
}

func newGVKToGVRCmd(out io.Writer, kube *kubeFlags) *cobra.Command {
	o := &gvkToGVROptions{}
	cmd := &cobra.Command{
		Use:   "gvk-to-gvr REF",
		Short: "Resolve a kind or resource name to its API resource through live discovery",
		Long: `Resolve REF through the API server's discovery documents, as kubectl does.

REF is any of: apps/v1/Deployment, v1/ConfigMap, Deployment.v1.apps,
deployments.apps, Deployment, deployments, deployment, deploy (a short name),
or a category such as "all". Kinds and names compare without regard to case.
An ambiguous REF prints every candidate, the one kubectl would pick first.`,
		Example: `  kgenctl gvk-to-gvr deploy
  kgenctl gvk-to-gvr apps/v1/Deployment -o json
  kgenctl gvk-to-gvr octopodes.example.com -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			config, err := kube.restConfig()
			if err != nil {
				return err
			}
			m, err := mapper.NewForConfig(config)
			if err != nil {
				return err
			}
			found, err := m.Resolve(args[0])
			if err != nil {
				return err
			}
			return printMappings(out, o.output, found)
		},
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

// printMappings writes one mapping as an object, or several (an ambiguous
// reference, a category) as a list.
func printMappings(out io.Writer, format string, found []mapper.Mapping) error {
	var doc any = found
	if len(found) == 1 {
		doc = found[0]
	}
	switch format {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(doc)
	case "yaml":
		b, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	case "table", "":
		w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
		fmt.Fprintln(w, "GROUP\tVERSION\tKIND\tRESOURCE\tNAMESPACED\tSHORTNAMES\tSUBRESOURCES")
		for _, m := range found {
			group := m.Group
			if group == "" {
				group = "core"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", group, m.Version, m.Kind, m.Resource, m.Namespaced,
				orNone(strings.Join(m.ShortNames, ",")), orNone(strings.Join(m.Subresources, ",")))
		}
		return w.Flush()
	default:
		return fmt.Errorf("unknown output format %q: use table, json or yaml", format)
	}
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
