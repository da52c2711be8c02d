package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"kgen.dev/kgen/pkg/explain"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/schema"
)

type explainOptions struct {
	rules       []string
	ruleObjects bool
}

func newExplainCmd(out io.Writer) *cobra.Command {
	o := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain KIND/NAME [-n NAMESPACE]",
		Short: "Show why a parent is the way it is: its children, what differs, what is not ready and why",
		Long: `Explain one parent: the rule that selects it, and for each of its children
whether it exists, whether it is up to date with its template (naming the
fields that differ), whether it is ready (the readyWhen that fails and the
values it saw), which children it waits on, and whether an object that is
not kgen's stands where it should be; then the parent's conditions and its
recent events.

KIND is any form kgenctl gvk-to-gvr takes (webapp, webapps.example.com,
example.com/v1alpha1/WebApp), resolved through live discovery; KIND NAME as
two arguments works too. The rules are those kgenctl run serves: the
--rules files and, unless --rule-objects=false, the cluster's Rule objects.

explain only reads (get and list). It judges the children as the
controller does, with the same comparison and the kinds' schemas; it does
not know what the server made of the controller's last writes, which the
controller remembers, so a difference the server made may show.

The default output is text, like kubectl describe; -o json prints one
object: {"parent", "rule", "conditions", "children": [{"id", "apiVersion",
"kind", "namespace", "name", "exists", "upToDate", "differences", "ready",
"waitingOn", "message", ...}], "events"}; -o yaml the same as YAML.`,
		Example: `  kgenctl explain webapp/shop -n team-a
  kgenctl explain webapps.example.com/shop -n team-a -o json
  kgenctl explain example.com/v1alpha1/WebApp/shop --rules rules.yaml --rule-objects=false`,
		Args: cobra.RangeArgs(1, 2),
	}
	kube := addKubeFlags(cmd)
	output := addOutputFlag(cmd, "text", "text")
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "rules file or directory of *.yaml/*.yml (repeatable), as for kgenctl run")
	f.BoolVar(&o.ruleObjects, "rule-objects", true, "also read the cluster's Rule objects (rules.kgen.dev)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		printer, err := output.printer() // an unknown format fails before any request
		if err != nil {
			return err
		}
		if output.format == "name" {
			return errors.New("-o name is not for explain: use text, json, yaml or jsonpath=TEMPLATE")
		}
		kind, name, err := parseParentRef(args)
		if err != nil {
			return err
		}
		if len(o.rules) == 0 && !o.ruleObjects {
			return errors.New("no rules: give --rules, or read Rule objects (--rule-objects)")
		}
		config, err := kube.restConfig()
		if err != nil {
			return err
		}
		namespace, err := kube.namespace()
		if err != nil {
			return err
		}
		resources, err := mapper.NewForConfig(config)
		if err != nil {
			return err
		}
		client, err := dynamic.NewForConfig(config)
		if err != nil {
			return err
		}
		disco, err := discovery.NewDiscoveryClientForConfig(config)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		rs, notes, err := explain.LoadRules(ctx, client, resources, explain.RuleSource{Paths: o.rules, Objects: o.ruleObjects})
		if err != nil {
			return kube.withServerMessage(err)
		}
		report, err := explain.Explain(ctx, explain.Config{
			Client: client, Resources: resources, Schemas: schema.New(disco.OpenAPIV3()), Rules: rs,
		}, explain.Ref{Kind: kind, Namespace: namespace, Name: name})
		if errors.Is(err, explain.ErrNoRule) && len(notes) > 0 {
			// The rule meant for it may be one explain left out.
			err = fmt.Errorf("%w\nNotes:\n  %s", err, strings.Join(notes, "\n  "))
		}
		if err != nil {
			return kube.withServerMessage(err)
		}
		report.Notes = append(notes, report.Notes...)
		if printer == nil {
			return report.WriteText(out)
		}
		raw, err := report.JSON()
		if err != nil {
			return err
		}
		// A report is not a Kubernetes object: the printers print it as
		// the JSON it is.
		return printer.PrintObj(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON}, out)
	}
	return cmd
}

// parseParentRef reads the parent's KIND/NAME, or KIND and NAME as two
// arguments. The name is after the last slash: KIND may have slashes of
// its own (example.com/v1alpha1/WebApp/shop).
func parseParentRef(args []string) (kind, name string, err error) {
	if len(args) == 2 {
		kind, name = args[0], args[1]
	} else if i := strings.LastIndex(args[0], "/"); i > 0 {
		kind, name = args[0][:i], args[0][i+1:]
	}
	if kind == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("want KIND/NAME, such as webapp/shop or example.com/v1alpha1/WebApp/shop, not %q", strings.Join(args, " "))
	}
	return kind, name, nil
}
