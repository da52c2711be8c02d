package rbac

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// Resolver finds the API resource of a kind.
type Resolver interface {
	Resolve(gvk schema.GroupVersionKind) (kinds.Mapping, error)
}

// Policy is the RBAC that a set of rules needs.
type Policy struct {
	// Cluster are the rules of kgen's ClusterRole.
	Cluster []rbacv1.PolicyRule
	// Namespaces maps a namespace to the rules of kgen's Role there.
	Namespaces map[string][]rbacv1.PolicyRule
	// Notes say what the rules cannot grant by themselves, or what was
	// assumed, one sentence each.
	Notes []string
	// ManageCRDs tells that the policy lets kgen manage the CRDs of the
	// rules' parent kinds (Options.ManageCRDs).
	ManageCRDs bool
}

// Options are what For grants beyond what every set of rules needs. The
// zero value grants nothing more.
type Options struct {
	// ManageCRDs grants what kgenctl run --manage-crds needs: create and
	// patch on the CustomResourceDefinition of every rule with
	// spec.parent.schema, by name. That is close to cluster-admin (a CRD
	// can be changed to anything), so it is asked for, never assumed.
	ManageCRDs bool
	// Sharding grants what 'kgenctl run --shards' needs beyond one kgen.
	// Nothing today: the shards write their kgen.dev/shard label with
	// patch on the parents, which every rule gets for kgen's finalizer,
	// and on the children, which have patch already (kgen's, or the
	// rule's ServiceAccount's, as which a shard relabels them).
	Sharding bool
}

// Verbs, in the order they are printed.
var verbOrder = []string{"get", "list", "watch", "create", "update", "patch", "delete", "bind", "impersonate"}

var (
	parentVerbs = []string{"get", "list", "watch"}
	childVerbs  = []string{"get", "list", "watch", "create", "patch", "delete"}
	eventVerbs  = []string{"create", "patch"}
	inputVerbs  = []string{"list", "watch"}
)

// crdGroup and crdResource name CustomResourceDefinitions.
const (
	crdGroup    = "apiextensions.k8s.io"
	crdResource = "customresourcedefinitions"
)

// StateRules are what 'kgenctl run' needs in its own namespace for its
// record of the rules' child kinds: the ConfigMap name (kgen-state unless
// --state-configmap names another), which it reads (get), creates by
// server-side apply and writes (patch), a key per rule. Every request
// names it, so resourceNames can limit the grant to it.
func StateRules(name string) []rbacv1.PolicyRule {
	if name == "" {
		name = StateConfigMap
	}
	return []rbacv1.PolicyRule{{
		APIGroups:     []string{""},
		Resources:     []string{"configmaps"},
		ResourceNames: []string{name},
		Verbs:         []string{"get", "create", "patch"},
	}}
}

// StateConfigMap is the default name of kgen's record of the rules' child
// kinds (controller.DefaultRecordName).
const StateConfigMap = "kgen-state"

// LeaderElectionRules are what 'kgenctl run --leader-elect' needs in the
// namespace of its Lease: get and update of that one Lease, by name, and
// create on Leases, which RBAC cannot limit by name (the name of an object
// to create is not known when its create is authorised).
func LeaderElectionRules(lease string) []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups:     []string{"coordination.k8s.io"},
		Resources:     []string{"leases"},
		ResourceNames: []string{lease},
		Verbs:         []string{"get", "update"},
	}, {
		APIGroups: []string{"coordination.k8s.io"},
		Resources: []string{"leases"},
		Verbs:     []string{"create"},
	}}
}

// RuleObjectRules are what 'kgenctl run' needs, cluster-wide, to serve the
// cluster's Rule objects: read them, and write their status.
func RuleObjectRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"kgen.dev"},
		Resources: []string{"rules"},
		Verbs:     []string{"get", "list", "watch"},
	}, {
		APIGroups: []string{"kgen.dev"},
		Resources: []string{"rules/status"},
		Verbs:     []string{"patch"},
	}}
}

// DiscoveryRules are what 'kgenctl run' needs, cluster-wide, to follow the
// objects that decide which kinds the cluster serves: list and watch of
// CustomResourceDefinitions and APIServices (their metadata only). Without
// them kgen still finds kinds served later, by asking discovery again every
// few seconds while a kind it needs is missing.
func DiscoveryRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"apiextensions.k8s.io"},
		Resources: []string{"customresourcedefinitions"},
		Verbs:     []string{"list", "watch"},
	}, {
		APIGroups: []string{"apiregistration.k8s.io"},
		Resources: []string{"apiservices"},
		Verbs:     []string{"list", "watch"},
	}}
}

// MetricsAuthRules are what 'kgenctl run --metrics-secure' needs,
// cluster-wide, to review the callers of its metrics port: create on
// TokenReviews and SubjectAccessReviews. To accept client certificates it
// also reads the cluster's client CA, through the built-in Role
// MetricsAuthReaderRole in kube-system.
func MetricsAuthRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"authentication.k8s.io"},
		Resources: []string{"tokenreviews"},
		Verbs:     []string{"create"},
	}, {
		APIGroups: []string{"authorization.k8s.io"},
		Resources: []string{"subjectaccessreviews"},
		Verbs:     []string{"create"},
	}}
}

// MetricsAuthReaderRole is the built-in Role in kube-system that lets
// aggregated API servers, and a secure kgen, read the cluster's client CA
// (the ConfigMap extension-apiserver-authentication).
const MetricsAuthReaderRole = "extension-apiserver-authentication-reader"

// ShardingRules are what 'kgenctl run --shards' needs in the namespace of
// the shards' Leases: each shard creates and renews its own Lease, lists
// and watches the others', takes over one that expired (fencing its
// holder) and deletes one long dead. Shards are named after their pods, so
// the Leases' names are not known in advance and cannot be listed.
func ShardingRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{
		APIGroups: []string{"coordination.k8s.io"},
		Resources: []string{"leases"},
		Verbs:     []string{"get", "list", "watch", "create", "update", "delete"},
	}}
}

// grantKey is one resource, or one named object of a resource.
type grantKey struct {
	group, resource, name string
}

// grants are verbs by namespace ("" for cluster-wide) and resource.
type grants map[string]map[grantKey]map[string]bool

func (g grants) add(namespaces []string, k grantKey, verbs ...string) {
	for _, ns := range namespaces {
		if g[ns] == nil {
			g[ns] = map[grantKey]map[string]bool{}
		}
		if g[ns][k] == nil {
			g[ns][k] = map[string]bool{}
		}
		for _, v := range verbs {
			g[ns][k][v] = true
		}
	}
}

var clusterWide = []string{""}

// For returns the least-privileged policy that lets kgen run the rules,
// and what opts asks for besides. Every kind the rules use is resolved
// first; all that fail are reported together.
func For(loaded []*rules.Rule, r Resolver, opts Options) (*Policy, error) {
	res := &resolver{r: r, done: map[schema.GroupVersionKind]kinds.Mapping{}, failed: map[schema.GroupVersionKind]bool{}}
	var notes []string
	g := grants{}
	for _, rule := range loaded {
		parent, ok := res.resolve(rule.Parent.GroupVersionKind, fmt.Sprintf("rule %s: parent", rule.Name))
		children := make([]kinds.Mapping, len(rule.Children))
		for i, c := range rule.Children {
			m, cok := res.resolve(c.GroupVersionKind, fmt.Sprintf("rule %s: child %s", rule.Name, c.ID))
			children[i], ok = m, ok && cok
		}
		inputs := make([]kinds.Mapping, len(rule.Inputs))
		for i, in := range rule.Inputs {
			m, iok := res.resolve(in.GroupVersionKind, fmt.Sprintf("rule %s: input %s", rule.Name, in.ID))
			inputs[i], ok = m, ok && iok
		}
		if !ok {
			continue
		}
		notes = append(notes, g.addRule(rule, parent, children, inputs, opts)...)
		if _, builtin := kinds.Builtin(rule.Parent.GroupVersionKind.GroupKind()); !builtin {
			// kgen reads the parent kind's CRD to check the rule's
			// expressions against its schema when the rule starts.
			g.add(clusterWide, grantKey{group: crdGroup, resource: crdResource, name: parent.Resource + "." + parent.Group}, "get")
		}
		if opts.ManageCRDs && rule.Parent.Schema != nil {
			crd, err := rule.CRD()
			if err != nil {
				res.errs = append(res.errs, err)
				continue
			}
			g.add(clusterWide, grantKey{group: crdGroup, resource: crdResource, name: crd.GetName()}, "get", "create", "patch")
		}
	}
	if err := errors.Join(res.errs...); err != nil {
		return nil, err
	}
	if len(res.unknownScope) > 0 {
		notes = append(notes, fmt.Sprintf("the scope of %s is not known: granted cluster-wide; give the CustomResourceDefinition, or the scope, to narrow it",
			strings.Join(res.unknownScope, ", ")))
	}
	p := &Policy{Cluster: policyRules(g[""]), Namespaces: map[string][]rbacv1.PolicyRule{}, Notes: dedupe(notes), ManageCRDs: opts.ManageCRDs}
	for ns, perms := range g {
		if ns == "" {
			continue
		}
		// What the ClusterRole grants need not be repeated in a Role.
		for k, verbs := range perms {
			for v := range verbs {
				if g[""][k][v] {
					delete(verbs, v)
				}
			}
			if len(verbs) == 0 {
				delete(perms, k)
			}
		}
		if len(perms) > 0 {
			p.Namespaces[ns] = policyRules(perms)
		}
	}
	return p, nil
}

// addRule grants what one rule needs and returns notes on what it cannot.
// Where kgen watches and writes is the rule's Placement, as the controller
// and the renderer see it.
func (g grants) addRule(rule *rules.Rule, parent kinds.Mapping, children, inputs []kinds.Mapping, opts Options) (notes []string) {
	scopes := resolvedScopes{rule.Parent.GroupVersionKind: parent}
	for i, c := range rule.Children {
		scopes[c.GroupVersionKind] = children[i]
	}
	for i, in := range rule.Inputs {
		scopes[in.GroupVersionKind] = inputs[i]
	}
	pl, err := rule.Placement(scopes)
	if err != nil { // resolvedScopes knows every kind of the rule
		panic(err)
	}
	parentAt := orClusterWide(pl.ParentNamespaces)
	parentKey := grantKey{group: parent.Group, resource: parent.Resource}
	g.add(parentAt, parentKey, parentVerbs...)
	if parent.Status {
		g.add(parentAt, grantKey{group: parent.Group, resource: parent.Resource + "/status"}, "patch")
	}
	g.add(orClusterWide(pl.EventNamespaces), grantKey{resource: "events"}, eventVerbs...)
	if sa := rule.ServiceAccount; sa != nil {
		// The children are written as the rule's ServiceAccount: kgen
		// only reads them (its caches), and may act as that one account.
		g.add([]string{sa.Namespace}, grantKey{resource: "serviceaccounts", name: sa.Name}, "impersonate")
		var kindsList []string
		for i := range rule.Children {
			child := children[i]
			g.add(orClusterWide(pl.Children[i].Namespaces), grantKey{group: child.Group, resource: child.Resource}, parentVerbs...)
			kindsList = append(kindsList, child.Resource+groupSuffix(child.Group))
		}
		need := "create, patch and delete on " + strings.Join(dedupe(kindsList), ", ") + " where they live"
		if pl.MayOwn() {
			need += ", and update on " + parent.Resource + groupSuffix(parent.Group) + "/finalizers (to set blockOwnerDeletion)"
		}
		notes = append(notes, fmt.Sprintf("rule %s writes its children as ServiceAccount %s/%s: that account needs %s (the team's own RBAC; kgen is granted only to read them and to impersonate it)",
			rule.Name, sa.Namespace, sa.Name, need))
	} else {
		for i, c := range rule.Children {
			child := children[i]
			childAt := orClusterWide(pl.Children[i].Namespaces)
			g.add(childAt, grantKey{group: child.Group, resource: child.Resource}, childVerbs...)
			notes = append(notes, g.addRBACChild(rule, c, child, childAt)...)
		}
	}
	for i, in := range inputs {
		// Inputs are read from informers' caches, never written.
		g.add(orClusterWide(pl.Inputs[i].Namespaces), grantKey{group: in.Group, resource: in.Resource}, inputVerbs...)
	}
	if pl.MayOwn() && rule.ServiceAccount == nil {
		// Checked by the OwnerReferencesPermissionEnforcement admission
		// plugin before it lets a child's ownerReference block the
		// parent's deletion.
		g.add(parentAt, grantKey{group: parent.Group, resource: parent.Resource + "/finalizers"}, "update")
	}
	// kgen's cleanup finalizer is set and removed by server-side apply of
	// the parent, and the shards patch its kgen.dev/shard label. Every
	// rule gets it, not only one that may need the finalizer now: a rule
	// whose earlier version needed it (or another rule that selected the
	// parent before) removes it from parents that still carry it, and
	// kgen releases parents of its kind that left every rule.
	g.add(parentAt, parentKey, "patch")
	// Where kgen watches by a Role (a namespace the rule names: of its
	// parents, of children it lets live elsewhere, of inputs), it may not
	// list once the namespace is deleted, as its Role went with it:
	// kgen, and kgenctl cleanup (helm uninstall's hook), read the
	// namespace to tell that it is gone, rather than refused. kgen then
	// runs the rule in its other namespaces.
	watched := slices.Clone(pl.ParentNamespaces)
	for _, c := range pl.Children {
		watched = append(watched, c.Namespaces...)
	}
	for _, in := range pl.Inputs {
		watched = append(watched, in.Namespaces...)
	}
	for _, ns := range dedupe(watched) {
		if ns != "" {
			g.add(clusterWide, grantKey{resource: "namespaces", name: ns}, "get")
		}
	}
	if pl.ParentNamespaces != nil && pl.MayNeedFinalizer() {
		// Deleting a namespace deletes kgen's Role there as well, in no
		// set order with the parents that hold kgen's finalizer: with
		// patch only there, kgen could not remove it, and the parents,
		// and the namespace, would wait for good. The patch comes from
		// the ClusterRole; kgen's only writes to a parent are its
		// finalizer, its status and its shard label.
		g.add(clusterWide, parentKey, "patch")
	}
	return notes
}

// orClusterWide returns namespaces, or clusterWide for nil (every
// namespace).
func orClusterWide(namespaces []string) []string {
	if namespaces == nil {
		return clusterWide
	}
	return namespaces
}

// resolvedScopes answers scope questions from resolved kinds.
type resolvedScopes map[schema.GroupVersionKind]kinds.Mapping

func (r resolvedScopes) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, ok := r[gvk]
	switch {
	case !ok:
		return false, fmt.Errorf("%w: %s", kinds.ErrUnknownKind, gvk)
	case m.Scope == kinds.ScopeUnknown:
		return false, fmt.Errorf("%w: %s", kinds.ErrUnknownScope, gvk)
	}
	return m.Scope == kinds.Namespaced, nil
}

// addRBACChild grants what RBAC's escalation checks ask of a child that is
// itself RBAC: binding a role needs bind on it, unless kgen holds every
// permission it grants. kgen never gets bind or escalate on every role.
func (g grants) addRBACChild(rule *rules.Rule, c *rules.Child, child kinds.Mapping, at []string) []string {
	if c.GroupVersionKind.Group != rbacv1.GroupName {
		return nil
	}
	where := fmt.Sprintf("rule %s: child %s", rule.Name, c.ID)
	switch c.GroupVersionKind.Kind {
	case "Role", "ClusterRole":
		// Not escalate: on every role it would let kgen grant anything
		// (contract §11), and a role's name can be computed.
		return []string{fmt.Sprintf("%s makes a %s: kgen must hold every permission it grants (add them with rbac.extraRules)",
			where, c.GroupVersionKind.Kind)}
	case "RoleBinding", "ClusterRoleBinding":
	default:
		return nil
	}
	kind, _ := c.Template.Literal("roleRef", "kind")
	var resources []string
	switch kind {
	case "ClusterRole":
		resources = []string{"clusterroles"}
	case "Role":
		resources = []string{"roles"}
	default:
		resources = []string{"clusterroles", "roles"}
	}
	// Only the roles the template names literally or, for a computed
	// roleRef.name, those of spec.allowBindRoles: the renderer refuses any
	// other, and bind on every role would let a parent grant anything.
	names := rule.AllowBindRoles
	if name, ok := c.Template.Literal("roleRef", "name"); ok && !c.TemplatedRoleRef() {
		if s, isStr := name.(string); isStr {
			names = []string{s}
		}
	}
	for _, r := range resources {
		for _, name := range names {
			g.add(at, grantKey{group: rbacv1.GroupName, resource: r, name: name}, "bind")
		}
	}
	return nil
}

// resolver resolves each kind once and collects the errors.
type resolver struct {
	r            Resolver
	done         map[schema.GroupVersionKind]kinds.Mapping
	failed       map[schema.GroupVersionKind]bool
	errs         []error
	unknownScope []string
}

func (res *resolver) resolve(gvk schema.GroupVersionKind, where string) (kinds.Mapping, bool) {
	if m, ok := res.done[gvk]; ok {
		return m, true
	}
	if res.failed[gvk] {
		return kinds.Mapping{}, false
	}
	m, err := res.r.Resolve(gvk)
	if err != nil {
		res.failed[gvk] = true
		res.errs = append(res.errs, fmt.Errorf("%s: %w", where, err))
		return kinds.Mapping{}, false
	}
	res.done[gvk] = m
	if m.Scope == kinds.ScopeUnknown {
		res.unknownScope = append(res.unknownScope, gvk.GroupKind().String())
	}
	return m, true
}

// policyRules turns grants into PolicyRules: resources with the same group
// and verbs share a rule, and so do named objects of the same resource.
func policyRules(perms map[grantKey]map[string]bool) []rbacv1.PolicyRule {
	type ruleKey struct {
		group, verbs, resource string // resource only for named objects
	}
	byKey := map[ruleKey]*rbacv1.PolicyRule{}
	for k, verbs := range perms {
		vs := orderedVerbs(verbs)
		rk := ruleKey{group: k.group, verbs: strings.Join(vs, ",")}
		if k.name != "" {
			rk.resource = k.resource
		}
		pr := byKey[rk]
		if pr == nil {
			pr = &rbacv1.PolicyRule{APIGroups: []string{k.group}, Verbs: vs}
			byKey[rk] = pr
		}
		if !slices.Contains(pr.Resources, k.resource) {
			pr.Resources = append(pr.Resources, k.resource)
		}
		if k.name != "" {
			pr.ResourceNames = append(pr.ResourceNames, k.name)
		}
	}
	out := make([]rbacv1.PolicyRule, 0, len(byKey))
	for _, pr := range byKey {
		slices.Sort(pr.Resources)
		slices.Sort(pr.ResourceNames)
		out = append(out, *pr)
	}
	slices.SortFunc(out, func(a, b rbacv1.PolicyRule) int {
		if c := strings.Compare(a.APIGroups[0], b.APIGroups[0]); c != 0 {
			return c
		}
		if c := strings.Compare(a.Resources[0], b.Resources[0]); c != 0 {
			return c
		}
		if c := strings.Compare(strings.Join(a.ResourceNames, ","), strings.Join(b.ResourceNames, ",")); c != 0 {
			return c
		}
		return strings.Compare(strings.Join(a.Verbs, ","), strings.Join(b.Verbs, ","))
	})
	return out
}

func orderedVerbs(set map[string]bool) []string {
	var out []string
	for _, v := range verbOrder {
		if set[v] {
			out = append(out, v)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(set)) {
		if !slices.Contains(verbOrder, v) {
			out = append(out, v)
		}
	}
	return out
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func groupSuffix(group string) string {
	if group == "" {
		return ""
	}
	return "." + group
}
