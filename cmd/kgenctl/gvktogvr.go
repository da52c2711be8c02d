package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/printers"

	"kgen.dev/kgen/pkg/mapper"
)

func newGVKToGVRCmd(out io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gvk-to-gvr REF",
		Short: "Resolve a kind or resource name to its API resource through live discovery",
		Long: `Resolve REF through the API server's discovery documents, as kubectl does.

REF is any of: apps/v1/Deployment, v1/ConfigMap, Deployment.v1.apps,
deployments.apps, Deployment, deployments, deployment, deploy (a short name),
or a category such as "all". Kinds and names compare without regard to case.
An ambiguous REF prints every candidate, the one kubectl would pick first.

The default output is a table. -o json and -o yaml print the mapping as one
object with the fields group, version, kind, resource, namespaced and what
discovery adds (singularName, shortNames, categories, subresources, verbs),
or a list of them for an ambiguous REF; -o jsonpath=TEMPLATE reads that
object or list; -o name prints RESOURCE.GROUP as kubectl api-resources does.

The connection flags are kubectl's. As for kubectl api-resources,
-n/--namespace is accepted and changes nothing: kinds are not namespaced.`,
		Example: `  kgenctl gvk-to-gvr deploy
  kgenctl gvk-to-gvr apps/v1/Deployment -o json
  kgenctl gvk-to-gvr octopodes.example.com -o yaml
  kgenctl gvk-to-gvr cm -o jsonpath='{.resource}'
  kgenctl gvk-to-gvr deploy --context prod --as jane`,
		Args: cobra.ExactArgs(1),
	}
	kube := addKubeFlags(cmd)
	cmd.Flags().Lookup("namespace").Usage = "accepted as by kubectl api-resources; changes nothing, kinds are not namespaced"
	output := addOutputFlag(cmd, "table", "table", "name")
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		printer, err := output.printer() // an unknown format fails before any request
		if err != nil {
			return err
		}
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
			return kube.withServerMessage(err)
		}
		return printMappings(out, output.format, printer, found)
	}
	return cmd
}

// printMappings writes the mappings with cli-runtime's printer p, as one
// object, or several (an ambiguous reference, a category) as a list; or,
// when p is nil, as a table or as their resource names.
func printMappings(out io.Writer, format string, p printers.ResourcePrinter, found []mapper.Mapping) error {
	if p != nil {
		var doc any = found
		if len(found) == 1 {
			doc = found[0]
		}
		raw, err := json.Marshal(doc)
		if err != nil {
			return err
		}
		// A mapping is not a Kubernetes object (its "kind" is data, and it
		// has no apiVersion): the printers print it as the JSON it is.
		return p.PrintObj(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, out)
	}
	var b strings.Builder
	switch format {
	case "table":
		w := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
		fmt.Fprintln(w, "GROUP\tVERSION\tKIND\tRESOURCE\tNAMESPACED\tSHORTNAMES\tSUBRESOURCES")
		for _, m := range found {
			group := m.Group
			if group == "" {
				group = "core"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", group, m.Version, m.Kind, m.Resource, m.Namespaced,
				orNone(strings.Join(m.ShortNames, ",")), orNone(strings.Join(m.Subresources, ",")))
		}
		_ = w.Flush() // writes to b, which never fails
	case "name":
		for _, m := range found {
			fmt.Fprintln(&b, schema.GroupResource{Group: m.Group, Resource: m.Resource}.String())
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
