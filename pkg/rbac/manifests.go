package rbac

import (
	"maps"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ManifestOptions name and label the objects Manifests returns. The zero
// value is sensible.
type ManifestOptions struct {
	// Name names the roles and bindings; "kgen" when empty.
	Name string
	// Namespace is kgen's own namespace, of its ServiceAccount and its
	// leader-election Lease; "kgen" when empty.
	Namespace string
	// ServiceAccount is the name of kgen's ServiceAccount; "kgen" when empty.
	ServiceAccount string
	// NoLeaderElection leaves out the Role for the Lease.
	NoLeaderElection bool
	// LeaseName is the leader-election Lease's name; "kgen" when empty.
	LeaseName string
	// StateName is the name of kgen's record ConfigMap (kgenctl run
	// --state-configmap); StateConfigMap when empty.
	StateName string
	// NoRuleObjects leaves out the ClusterRole for serving Rule objects
	// (kgenctl run --rule-objects=false).
	NoRuleObjects bool
	// Sharding has the Role for the shards' Leases (ShardingRules) instead
	// of the leader-election one.
	Sharding bool
	// MetricsSecure adds what 'kgenctl run --metrics-secure' needs: the
	// ClusterRole NAME-metrics-auth (MetricsAuthRules) and a RoleBinding
	// NAME-metrics-auth-reader in kube-system to MetricsAuthReaderRole.
	MetricsSecure bool
	// Labels are put on every object.
	Labels map[string]string
}

func (o ManifestOptions) withDefaults() ManifestOptions {
	if o.Name == "" {
		o.Name = "kgen"
	}
	if o.Namespace == "" {
		o.Namespace = "kgen"
	}
	if o.ServiceAccount == "" {
		o.ServiceAccount = "kgen"
	}
	if o.LeaseName == "" {
		o.LeaseName = "kgen"
	}
	return o
}

// Manifests returns the RBAC objects of the policy, bound to kgen's
// ServiceAccount: the ClusterRole and its binding (when the policy has
// cluster rules), a Role and RoleBinding per namespace in name order, the
// ClusterRoles of DiscoveryRules and (unless NoRuleObjects) RuleObjectRules,
// the Role and RoleBinding of kgen's record (StateRules), the
// leader-election (or the shards') Role and RoleBinding, and with
// MetricsSecure the metrics reviews' ClusterRole and bindings. Each is a
// map ready to be written as YAML or JSON.
func (p *Policy) Manifests(o ManifestOptions) []map[string]any {
	o = o.withDefaults()
	subject := []any{map[string]any{"kind": "ServiceAccount", "name": o.ServiceAccount, "namespace": o.Namespace}}
	var out []map[string]any
	bind := func(kind, role, name, namespace string) {
		bindingKind := "RoleBinding"
		if kind == "ClusterRole" && namespace == "" {
			bindingKind = "ClusterRoleBinding"
		}
		b := object(bindingKind, name, namespace, o.Labels)
		b["roleRef"] = map[string]any{"apiGroup": rbacv1.GroupName, "kind": kind, "name": role}
		b["subjects"] = subject
		out = append(out, b)
	}
	role := func(kind, name, namespace string, rules []rbacv1.PolicyRule) {
		r := object(kind, name, namespace, o.Labels)
		r["rules"] = policyRulesValue(rules)
		out = append(out, r)
		bind(kind, name, name, namespace)
	}
	if len(p.Cluster) > 0 {
		role("ClusterRole", o.Name, "", p.Cluster)
	}
	for _, ns := range slices.Sorted(maps.Keys(p.Namespaces)) {
		role("Role", o.Name, ns, p.Namespaces[ns])
	}
	role("ClusterRole", o.Name+"-discovery", "", DiscoveryRules())
	if !o.NoRuleObjects {
		role("ClusterRole", o.Name+"-rule-objects", "", RuleObjectRules())
	}
	role("Role", o.Name+"-state", o.Namespace, StateRules(o.StateName))
	switch {
	case o.Sharding:
		role("Role", o.Name+"-shards", o.Namespace, ShardingRules())
	case !o.NoLeaderElection:
		role("Role", o.Name+"-leader-election", o.Namespace, LeaderElectionRules(o.LeaseName))
	}
	if o.MetricsSecure {
		role("ClusterRole", o.Name+"-metrics-auth", "", MetricsAuthRules())
		bind("Role", MetricsAuthReaderRole, o.Name+"-metrics-auth-reader", metav1.NamespaceSystem)
	}
	return out
}

// HelmValues returns the policy as the values of charts/kgen: rbac.rules.cluster
// and rbac.rules.namespaces, and manageCRDs when the policy grants it. (The
// chart makes the Roles of kgen's own namespace, StateRules and
// LeaderElectionRules, itself.)
func (p *Policy) HelmValues() map[string]any {
	namespaces := map[string]any{}
	for ns, rules := range p.Namespaces {
		namespaces[ns] = policyRulesValue(rules)
	}
	values := map[string]any{"rbac": map[string]any{"rules": map[string]any{
		"cluster":    policyRulesValue(p.Cluster),
		"namespaces": namespaces,
	}}}
	if p.ManageCRDs {
		values["manageCRDs"] = true
	}
	return values
}

func object(kind, name, namespace string, labels map[string]string) map[string]any {
	meta := map[string]any{"name": name}
	if namespace != "" {
		meta["namespace"] = namespace
	}
	if len(labels) > 0 {
		l := map[string]any{}
		for k, v := range labels {
			l[k] = v
		}
		meta["labels"] = l
	}
	return map[string]any{"apiVersion": rbacv1.SchemeGroupVersion.String(), "kind": kind, "metadata": meta}
}

func policyRulesValue(rules []rbacv1.PolicyRule) []any {
	out := make([]any, 0, len(rules))
	for i := range rules {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&rules[i])
		if err != nil { // a PolicyRule always converts
			panic(err)
		}
		out = append(out, m)
	}
	return out
}
