package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
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
	output         *outputFlags
	name           string
	namespace      string
	serviceAccount string
	leaderElect    bool
	leaseName      string
	stateName      string
	ruleObjects    bool
	shards         bool
	manageCRDs     bool
	metricsSecure  bool
}

func newRBACCmd(out io.Writer) *cobra.Command {
	o := &rbacOptions{}
	cmd := &cobra.Command{
		Use:   "rbac --rules PATH",
		Short: "Print the least-privileged RBAC that kgen needs to run the rules",
		Long: `Print the RBAC that "kgenctl run" needs for the rules, and nothing more:
get/list/watch on the parents, patch on them (kgen's finalizer) and on their
status subresource, the child kinds' get/list/watch/create/patch/delete,
list/watch on the inputs, events, get on the CustomResourceDefinition of each
custom parent kind (kgen checks the rules against its schema), the ConfigMap
kgen-state in kgen's namespace (its record of the rules' kinds), list/watch
on CRDs and APIServices (to follow the cluster's kinds), and the
leader-election Lease (with --shards, the shards' Leases), and with
--metrics-secure what reviewing the metrics port's callers takes. A rule limited to
namespaces gets Roles in those namespaces; cluster-wide only get on the
namespaces it names (to tell one that was deleted), and patch on its parent
kind when its parents may hold kgen's finalizer (deleting a namespace
deletes kgen's Role there too).
Notes on what cannot be derived from the rules go to stderr.

With --manage-crds, also create and patch on the CRD of every rule with
spec.parent.schema, for "kgenctl run --manage-crds": whoever may change a
CRD may change what every object of it is, so it is never granted unasked.
A rule's spec.parent.schema is enough to resolve its parent kind offline.

Kinds are resolved offline by default: built-in kinds from a table compiled
into kgenctl, custom resources from their CustomResourceDefinitions (--crd)
or as named with --resource KIND.GROUP=PLURAL[:Namespaced|Cluster]. kgenctl
never guesses a plural: a kind it cannot resolve is an error. With
--offline=false, every kind is resolved through the cluster's discovery
instead, reached with kubectl's connection flags; offline, those flags are
an error. -n/--namespace is not the kubeconfig's namespace: it is where kgen
runs, as below.

Output: the RBAC manifests (-o yaml, the default), bound to the ServiceAccount
--service-account in --namespace; -o json prints them as a v1 List, -o name
as KIND.GROUP/NAME lines, and -o jsonpath=TEMPLATE reads that List. Or the
rbac.rules values of the Helm chart charts/kgen (-o helm-values).`,
		Example: `  kgenctl rbac --rules examples/webapp/rules.yaml --crd examples/webapp/crd.yaml
  kgenctl rbac --rules rules/ --crd crds/ -o helm-values > rbac-values.yaml
  kgenctl rbac --rules rules/ --resource WebApp.example.com=webapps:Namespaced
  kgenctl rbac --rules rules/ --offline=false --context prod`,
		Args: cobra.NoArgs,
	}
	// rbac's -n/--namespace is kgen's own namespace, below.
	kube := addKubeFlagsWith(cmd, false)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if o.offline {
			if set := kube.changed(cmd); len(set) > 0 {
				return fmt.Errorf("%s: connection flags are for --offline=false; offline, kgenctl rbac connects to no cluster", strings.Join(set, ", "))
			}
		}
		return o.run(out, cmd.ErrOrStderr(), kube)
	}
	o.output = addOutputFlag(cmd, "yaml", "helm-values")
	f := cmd.Flags()
	f.StringArrayVar(&o.rules, "rules", nil, "a rules file or directory (repeatable)")
	f.StringArrayVar(&o.crds, "crd", nil, "a file of CustomResourceDefinitions of kinds the rules use (repeatable; offline only)")
	f.StringArrayVar(&o.resources, "resource", nil, "a custom resource as KIND[.GROUP]=PLURAL[:Namespaced|Cluster] (repeatable; offline only)")
	f.BoolVar(&o.offline, "offline", true, "resolve kinds without a cluster; false asks the cluster's discovery")
	f.StringVar(&o.name, "name", "kgen", "name of the roles and bindings (manifests)")
	f.StringVarP(&o.namespace, "namespace", "n", "kgen", "namespace kgen runs in: of its ServiceAccount and Lease (manifests)")
	f.StringVar(&o.serviceAccount, "service-account", "kgen", "kgen's ServiceAccount, the subject of the bindings (manifests)")
	f.BoolVar(&o.leaderElect, "leader-elect", true, "include the Role for the leader-election Lease (manifests)")
	f.StringVar(&o.leaseName, "leader-elect-id", "kgen", "name of the leader-election Lease, which the Role names (manifests)")
	f.StringVar(&o.stateName, "state-configmap", rbac.StateConfigMap, "name of kgen's record ConfigMap (kgenctl run --state-configmap), which the Role names (manifests)")
	f.BoolVar(&o.ruleObjects, "rule-objects", true, "include the ClusterRole for serving Rule objects, as kgenctl run does by default (manifests)")
	f.BoolVar(&o.shards, "shards", false, "for 'kgenctl run --shards': the Role for the shards' Leases instead of the leader-election one (manifests)")
	f.BoolVar(&o.metricsSecure, "metrics-secure", false, "for 'kgenctl run --metrics-secure': create on TokenReviews and SubjectAccessReviews, and a RoleBinding in kube-system to read the cluster's client CA (manifests)")
	f.BoolVar(&o.manageCRDs, "manage-crds", false, "also grant create and patch on the CRDs of the rules with spec.parent.schema, for kgenctl run --manage-crds (with -o helm-values: manageCRDs: true)")
	_ = cmd.MarkFlagRequired("rules")
	return cmd
}

func (o *rbacOptions) run(out, notes io.Writer, kube *kubeFlags) error {
	printer, err := o.output.printer()
	if err != nil {
		return err
	}
	loaded, err := rules.Load(o.rules, rules.Options{})
	if err != nil {
		return err
	}
	resolver, err := o.resolver(kube, loaded)
	if err != nil {
		return err
	}
	policy, err := rbac.For(loaded, resolver, rbac.Options{Sharding: o.shards, ManageCRDs: o.manageCRDs})
	err = kube.withServerMessage(err)
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
	if printer != nil {
		return o.printManifests(out, printer, policy)
	}
	// -o helm-values: the chart's values.
	var b strings.Builder
	b.WriteString(o.header())
	use := "# Use with: helm install kgen charts/kgen -f THIS_FILE --set-file rules.NAME=RULES_FILE"
	if o.shards {
		use += " \\\n#     --set sharding.enabled=true --set leaderElection.enabled=false"
	}
	b.WriteString(use + "\n")
	y, err := yaml.Marshal(policy.HelmValues())
	if err != nil {
		return err
	}
	b.Write(y)
	_, err = io.WriteString(out, b.String())
	return err
}

func (o *rbacOptions) header() string {
	shards := ""
	if o.shards {
		shards = ", for 'kgenctl run --shards'"
	}
	return fmt.Sprintf("# Written by 'kgenctl rbac' for the rules in %s%s.\n", strings.Join(o.rules, ", "), shards)
}

// printManifests prints the RBAC manifests: after a header as a YAML
// stream, or with any other format as a v1 List.
func (o *rbacOptions) printManifests(out io.Writer, printer printers.ResourcePrinter, policy *rbac.Policy) error {
	manifests := policy.Manifests(rbac.ManifestOptions{
		Name: o.name, Namespace: o.namespace, ServiceAccount: o.serviceAccount, NoLeaderElection: !o.leaderElect,
		LeaseName: o.leaseName, StateName: o.stateName, NoRuleObjects: !o.ruleObjects, Sharding: o.shards, MetricsSecure: o.metricsSecure,
		Labels: map[string]string{"app.kubernetes.io/name": "kgen", "app.kubernetes.io/component": "rbac"},
	})
	objs := make([]unstructured.Unstructured, len(manifests))
	for i, m := range manifests {
		objs[i].Object = m
	}
	if o.output.format == "yaml" {
		if _, err := io.WriteString(out, o.header()); err != nil {
			return err
		}
	}
	return printObjects(out, o.output.format, printer, objs)
}

// resolver returns the cluster's discovery, or the offline resolver with the
// CRDs and resources given, and those the rules describe with
// spec.parent.schema.
func (o *rbacOptions) resolver(kube *kubeFlags, loaded []*rules.Rule) (rbac.Resolver, error) {
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
	for _, r := range loaded {
		if r.Parent.Schema == nil || s.HasCRD(r.Parent.GroupVersionKind.GroupKind()) {
			continue
		}
		crd, err := r.CRD()
		if err != nil {
			return nil, err
		}
		if err := s.AddCRD(crd); err != nil {
			return nil, fmt.Errorf("rule %s: %w", r.Name, err)
		}
	}
	return s, nil
}
