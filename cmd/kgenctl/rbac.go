package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/rbac"
	"kgen.dev/kgen/rules"
)

type rbacOptions struct {
	rules          []string
	crds           []string
	resources      []string
	offline        bool
	output         string
	name           string
	namespace      string
	serviceAccount string
	leaderElect    bool
}

func newRBACCmd(out io.Writer, kube *kubeFlags) *cobra.Command {
	o := &rbacOptions{}
	cmd := &cobra.Command{
		Use:   "rbac --rules PATH",
		Short: "Print the least-privileged RBAC that kgen needs to run the rules",
		Long: `Print the RBAC that "kgenctl run" needs for the rules, and nothing more:
get/list/watch on the parents, patch on their status subresource, the child
kinds' get/list/watch/create/patch/delete, events, and the leader-election
Lease. A rule limited to namespaces gets Roles in those namespaces rather
than ClusterRole rules. Notes on what cannot be derived from the rules go
to stderr.

Kinds are resolved offline by default: built-in kinds from a table compiled
into kgenctl, custom resources from their CustomResourceDefinitions (--crd)
or as named with --resource KIND.GROUP=PLURAL[:Namespaced|Cluster]. kgenctl
never guesses a plural: a kind it cannot resolve is an error. With
--offline=false, every kind is resolved through the cluster's discovery
instead (the kubeconfig flags as for the other commands).

Output: the RBAC manifests (-o yaml, the default), bound to the ServiceAccount
--service-account in --namespace; or the rbac.rules values of the Helm chart
charts/kgen (-o helm-values).`,
		Example: `  kgenctl rbac --rules examples/webapp/rules.yaml --crd examples/webapp/crd.yaml
  kgenctl rbac --rules rules/ --crd crds/ -o helm-values > rbac-values.yaml
  kgenctl rbac --rules rules/ --resource WebApp.example.com=webapps:Namespaced
  kgenctl rbac --rules rules/ --offline=false --context prod`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(out, cmd.ErrOrStderr(), kube)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "a rules file or directory (repeatable)")
	f.StringArrayVar(&o.crds, "crd", nil, "a file of CustomResourceDefinitions of kinds the rules use (repeatable; offline only)")
	f.StringArrayVar(&o.resources, "resource", nil, "a custom resource as KIND[.GROUP]=PLURAL[:Namespaced|Cluster] (repeatable; offline only)")
	f.BoolVar(&o.offline, "offline", true, "resolve kinds without a cluster; false asks the cluster's discovery")
	f.StringVarP(&o.output, "output", "o", "yaml", "output format: yaml (RBAC manifests) or helm-values (values for charts/kgen)")
	f.StringVar(&o.name, "name", "kgen", "name of the roles and bindings (yaml output)")
	f.StringVar(&o.namespace, "namespace", "kgen", "namespace kgen runs in: of its ServiceAccount and Lease (yaml output)")
	f.StringVar(&o.serviceAccount, "service-account", "kgen", "kgen's ServiceAccount, the subject of the bindings (yaml output)")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "include the Role for the leader-election Lease (yaml output)")
	_ = cmd.MarkFlagRequired("rules")
	return cmd
}

func (o *rbacOptions) run(out, notes io.Writer, kube *kubeFlags) error {
	if o.output != "yaml" && o.output != "helm-values" {
		return fmt.Errorf("unknown output format %q: use yaml or helm-values", o.output)
	}
	loaded, err := rules.Load(o.rules, rules.Options{})
	if err != nil {
		return err
	}
	resolver, err := o.resolver(kube)
	if err != nil {
		return err
	}
	policy, err := rbac.For(loaded, resolver)
	if errors.Is(err, kinds.ErrUnknownKind) {
		return fmt.Errorf("%w\n(give each custom resource's CustomResourceDefinition with --crd FILE, or its resource with --resource KIND.GROUP=PLURAL:SCOPE, or resolve the kinds through the cluster with --offline=false)", err)
	}
	if err != nil {
		return err
	}
	for _, n := range policy.Notes {
		if _, err := fmt.Fprintf(notes, "# note: %s\n", n); err != nil {
			return err
		}
	}
	header := fmt.Sprintf("# Written by 'kgenctl rbac' for the rules in %s.\n", strings.Join(o.rules, ", "))
	var docs []any
	if o.output == "helm-values" {
		header += "# Use with: helm install kgen charts/kgen -f THIS_FILE --set-file rules.NAME=RULES_FILE\n"
		docs = append(docs, policy.HelmValues())
	} else {
		manifests := policy.Manifests(rbac.ManifestOptions{
			Name: o.name, Namespace: o.namespace, ServiceAccount: o.serviceAccount, NoLeaderElection: !o.leaderElect,
			Labels: map[string]string{"app.kubernetes.io/name": "kgen", "app.kubernetes.io/component": "rbac"},
		})
		for _, m := range manifests {
			docs = append(docs, m)
		}
	}
	var b strings.Builder
	b.WriteString(header)
	for i, d := range docs {
		if i > 0 {
			b.WriteString("---\n")
		}
		y, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		b.Write(y)
	}
	_, err = io.WriteString(out, b.String())
	return err
}

// resolver returns the cluster's discovery, or the offline resolver with the
// CRDs and resources given.
func (o *rbacOptions) resolver(kube *kubeFlags) (rbac.Resolver, error) {
	if !o.offline {
		if len(o.crds) > 0 || len(o.resources) > 0 {
			return nil, errors.New("--crd and --resource are for --offline; with --offline=false the cluster's discovery resolves every kind")
		}
		config, err := kube.restConfig()
		if err != nil {
			return nil, err
		}
		m, err := mapper.NewForConfig(config)
		if err != nil {
			return nil, err
		}
		return rbac.Discovery{Mapper: m}, nil
	}
	s := kinds.NewStatic()
	for _, path := range o.crds {
		objs, err := readObjects(path)
		if err != nil {
			return nil, err
		}
		for _, crd := range objs {
			if err := s.AddCRD(crd); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	for _, spec := range o.resources {
		if err := s.AddResource(spec); err != nil {
			return nil, err
		}
	}
	return s, nil
}
