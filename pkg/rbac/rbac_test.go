package rbac

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
	"kgen.dev/kgen/rules"
)

// fakeResolver knows the kinds the tests use, as a cluster would.
type fakeResolver map[string]kinds.Mapping

func (f fakeResolver) Resolve(gvk schema.GroupVersionKind) (kinds.Mapping, error) {
	if r, ok := f[gvk.Kind]; ok {
		return r, nil
	}
	return kinds.Mapping{}, fmt.Errorf("%w: %s", kinds.ErrUnknownKind, gvk.Kind)
}

var cluster = fakeResolver{
	"App":         {Group: "example.com", Resource: "apps", Scope: kinds.Namespaced, Status: true},
	"Plain":       {Group: "example.com", Resource: "plains", Scope: kinds.Namespaced},
	"Tenant":      {Group: "example.com", Resource: "tenants", Scope: kinds.Cluster, Status: true},
	"Guess":       {Group: "example.com", Resource: "guesses", Status: true},
	"ConfigMap":   {Resource: "configmaps", Scope: kinds.Namespaced},
	"Secret":      {Resource: "secrets", Scope: kinds.Namespaced},
	"Namespace":   {Resource: "namespaces", Scope: kinds.Cluster, Status: true},
	"RoleBinding": {Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Scope: kinds.Namespaced},
	"Role":        {Group: "rbac.authorization.k8s.io", Resource: "roles", Scope: kinds.Namespaced},
}

// rule writes a rule with a parent of the given kind and extra parent and
// spec lines, and children given as "kind" or "kind: extra template YAML",
// where kind may be followed by @namespace for the template's
// metadata.namespace.
func rule(name, parentKind, parentExtra, specExtra string, children ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: %s}\nspec:\n%s  parent:\n    apiVersion: example.com/v1\n    kind: %s\n%s  children:\n",
		name, specExtra, parentKind, parentExtra)
	for i, c := range children {
		kind, extra, _ := strings.Cut(c, ":")
		kind, ns, _ := strings.Cut(kind, "@")
		apiVersion := "v1"
		switch {
		case strings.HasPrefix(kind, "Role"):
			apiVersion = "rbac.authorization.k8s.io/v1"
		case strings.HasPrefix(kind, "Unknown"):
			apiVersion = "example.com/v1" // the core group's kinds are all known
		}
		meta := fmt.Sprintf(`{name: "x%d"}`, i)
		if ns != "" {
			meta = fmt.Sprintf(`{name: "x%d", namespace: "%s"}`, i, ns)
		}
		fmt.Fprintf(&b, "  - id: c%d\n    template:\n      apiVersion: %s\n      kind: %s\n      metadata: %s\n", i, apiVersion, kind, meta)
		if extra != "" {
			fmt.Fprintf(&b, "      %s\n", strings.TrimSpace(extra))
		}
	}
	return b.String()
}

// lines describes a policy one PolicyRule a line: where (* for the
// ClusterRole), group, resources[names], verbs.
func lines(p *Policy) []string {
	var out []string
	add := func(where string, rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			res := strings.Join(r.Resources, ",")
			if len(r.ResourceNames) > 0 {
				res += "[" + strings.Join(r.ResourceNames, ",") + "]"
			}
			group := r.APIGroups[0]
			if group == "" {
				group = "core"
			}
			out = append(out, fmt.Sprintf("%s %s %s %s", where, group, res, strings.Join(r.Verbs, ",")))
		}
	}
	add("*", p.Cluster)
	for _, ns := range slices.Sorted(maps.Keys(p.Namespaces)) {
		add(ns, p.Namespaces[ns])
	}
	return out
}

const all = "get,list,watch,create,patch,delete"

func TestFor(t *testing.T) {
	tests := []struct {
		name  string
		rules string
		opts  Options
		// crds keeps the rules on customresourcedefinitions in want;
		// other rows leave them out.
		crds      bool
		want      []string
		wantNotes []string
	}{
		{
			name:  "the parent kind's CRD may be read, by name, to check the rule against it",
			rules: rule("r1", "App", "    namespaces: [a]\n", "", "ConfigMap") + "---\n" + rule("r2", "Tenant", "    scope: Cluster\n", "", "ConfigMap@x"),
			crds:  true,
			want: []string{
				"* apiextensions.k8s.io customresourcedefinitions[apps.example.com,tenants.example.com] get",
				"* example.com tenants get,list,watch,patch",
				"* example.com tenants/finalizers update",
				"* example.com tenants/status patch",
				"a core configmaps " + all,
				"a core events create,patch",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
				"default core events create,patch",
				"x core configmaps " + all,
			},
		},
		{
			name:  "a built-in parent kind has no CRD",
			rules: strings.Replace(rule("r", "Namespace", "", "", "ConfigMap@${parent.metadata.name}"), "apiVersion: example.com/v1\n    kind: Namespace", "apiVersion: v1\n    kind: Namespace", 1),
			crds:  true,
			want: []string{
				"* core configmaps " + all,
				"* core namespaces get,list,watch,patch",
				"* core namespaces/finalizers update",
				"* core namespaces/status patch",
				"default core events create,patch",
			},
		},
		{
			name:  "--manage-crds: create and patch the CRD of a rule with spec.parent.schema, by name",
			rules: rule("r1", "App", "    namespaces: [a]\n    schema: {image: string}\n", "", "ConfigMap") + "---\n" + rule("r2", "Plain", "", "", "ConfigMap"),
			opts:  Options{ManageCRDs: true},
			crds:  true,
			want: []string{
				"* core configmaps " + all,
				"* core events create,patch",
				"* apiextensions.k8s.io customresourcedefinitions[apps.example.com] get,create,patch",
				"* apiextensions.k8s.io customresourcedefinitions[plains.example.com] get",
				"* example.com plains get,list,watch,patch",
				"* example.com plains/finalizers update",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
			},
		},
		{
			name:  "namespaced parent in every namespace",
			rules: rule("r", "App", "", "", "ConfigMap"),
			want: []string{
				"* core configmaps " + all,
				"* core events create,patch",
				"* example.com apps get,list,watch,patch",
				"* example.com apps/finalizers update",
				"* example.com apps/status patch",
			},
		},
		{
			name:  "a parent without a status subresource gets no status rule",
			rules: rule("r", "Plain", "", "", "ConfigMap"),
			want: []string{
				"* core configmaps " + all,
				"* core events create,patch",
				"* example.com plains get,list,watch,patch",
				"* example.com plains/finalizers update",
			},
		},
		{
			name:  "limited to namespaces: Roles (and get on the namespaces, TestForParentNamespaces)",
			rules: rule("r", "App", "    namespaces: [a, b]\n", "", "ConfigMap"),
			want: []string{
				"a core configmaps " + all,
				"a core events create,patch",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
				"b core configmaps " + all,
				"b core events create,patch",
				"b example.com apps get,list,watch,patch",
				"b example.com apps/finalizers update",
				"b example.com apps/status patch",
			},
		},
		{
			// Its children are written as the ServiceAccount: kgen reads
			// them and may impersonate that one account, nothing more.
			name:  "a rule with a serviceAccount",
			rules: rule("r", "App", "    namespaces: [a]\n", "  serviceAccount: {namespace: team, name: writer}\n", "ConfigMap"),
			want: []string{
				"a core configmaps get,list,watch",
				"a core events create,patch",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/status patch",
				"team core serviceaccounts[writer] impersonate",
			},
			wantNotes: []string{"rule r writes its children as ServiceAccount team/writer: that account needs create, patch and delete on configmaps where they live, and update on apps.example.com/finalizers (to set blockOwnerDeletion) (the team's own RBAC; kgen is granted only to read them and to impersonate it)"},
		},
		{
			// The finalizer's patch is cluster-wide: deleting namespace
			// a deletes kgen's Role there too, in no set order with the
			// parents that hold the finalizer.
			name:  "a cluster-scoped child of a limited parent: cluster-wide child, finalizer by patch",
			rules: rule("r", "App", "    namespaces: [a]\n", "", "Namespace", "ConfigMap"),
			want: []string{
				"* core namespaces " + all,
				"* example.com apps patch",
				"a core configmaps " + all,
				"a core events create,patch",
				"a example.com apps get,list,watch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
			},
		},
		{
			name:  "a child in the parent's namespace is watched only there, even when others may cross",
			rules: rule("r", "App", "    namespaces: [a]\n", "  allowCrossNamespace: [b]\n", "ConfigMap"),
			want: []string{
				"a core configmaps " + all,
				"a core events create,patch",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
			},
		},
		{
			name:  "cross-namespace children of a limited parent: Roles in its namespaces and the allowed ones",
			rules: rule("r", "App", "    namespaces: [a]\n", "  allowCrossNamespace: [b, c]\n", "ConfigMap@${parent.spec.target}", "Secret@c"),
			want: []string{
				"* example.com apps patch",
				"a core configmaps " + all,
				"a core events create,patch",
				"a example.com apps get,list,watch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
				"b core configmaps " + all,
				"c core configmaps,secrets " + all,
			},
		},
		{
			name:  "cross-namespace children of a parent in any namespace are watched everywhere",
			rules: rule("r", "App", "", "  allowCrossNamespace: [b]\n", "ConfigMap@${parent.spec.target}"),
			want: []string{
				"* core configmaps " + all,
				"* core events create,patch",
				"* example.com apps get,list,watch,patch",
				"* example.com apps/finalizers update",
				"* example.com apps/status patch",
			},
		},
		{
			name:  "a cluster-scoped parent owns every child; its events go to default",
			rules: rule("r", "Tenant", "    scope: Cluster\n", "", "Namespace", "ConfigMap@${parent.metadata.name}"),
			want: []string{
				"* core configmaps,namespaces " + all,
				"* example.com tenants get,list,watch,patch",
				"* example.com tenants/finalizers update",
				"* example.com tenants/status patch",
				"default core events create,patch",
			},
		},
		{
			name:  "a RoleBinding needs bind on the role it names",
			rules: rule("r", "App", "    namespaces: [a]\n", "", "RoleBinding:roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}"),
			want: []string{
				"a core events create,patch",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
				"a rbac.authorization.k8s.io clusterroles[edit] bind",
				"a rbac.authorization.k8s.io rolebindings " + all,
			},
		},
		{
			name:  "a computed roleRef gets bind only on the roles of allowBindRoles",
			rules: rule("r", "App", "", "  allowBindRoles: [view, edit]\n", "RoleBinding:roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: \"${parent.spec.role}\"}"),
			want: []string{
				"* core events create,patch",
				"* example.com apps get,list,watch,patch",
				"* example.com apps/finalizers update",
				"* example.com apps/status patch",
				"* rbac.authorization.k8s.io clusterroles[edit,view] bind",
				"* rbac.authorization.k8s.io rolebindings " + all,
			},
		},
		{
			name:  "a computed roleRef kind: bind on roles and cluster roles of those names",
			rules: rule("r", "App", "    namespaces: [a]\n", "  allowBindRoles: [view]\n", "RoleBinding:roleRef: {apiGroup: rbac.authorization.k8s.io, kind: \"${parent.spec.kind}\", name: \"${parent.spec.role}\"}"),
			want: []string{
				"a core events create,patch",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
				"a rbac.authorization.k8s.io clusterroles[view] bind",
				"a rbac.authorization.k8s.io rolebindings " + all,
				"a rbac.authorization.k8s.io roles[view] bind",
			},
		},
		{
			name:  "a literal roleRef next to allowBindRoles binds only its role",
			rules: rule("r", "App", "", "  allowBindRoles: [view]\n", "RoleBinding:roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}"),
			want: []string{
				"* core events create,patch",
				"* example.com apps get,list,watch,patch",
				"* example.com apps/finalizers update",
				"* example.com apps/status patch",
				"* rbac.authorization.k8s.io clusterroles[admin] bind",
				"* rbac.authorization.k8s.io rolebindings " + all,
			},
		},
		{
			name:  "inputs: list and watch where they can be",
			rules: rule("r", "App", "    namespaces: [a]\n", "  inputs:\n  - {id: own, apiVersion: v1, kind: Secret, name: x}\n  - {id: shared, apiVersion: v1, kind: Secret, name: x, namespace: common}\n  - {id: any, apiVersion: v1, kind: ConfigMap, selector: {}, namespace: '${parent.spec.ns}'}\n", "ConfigMap"),
			want: []string{
				"* core configmaps list,watch",
				"a core configmaps get,create,patch,delete",
				"a core events create,patch",
				"a core secrets list,watch",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
				"common core secrets list,watch",
			},
		},
		{
			name:  "a Role child is noted",
			rules: rule("r", "App", "", "", "Role"),
			want: []string{
				"* core events create,patch",
				"* example.com apps get,list,watch,patch",
				"* example.com apps/finalizers update",
				"* example.com apps/status patch",
				"* rbac.authorization.k8s.io roles " + all,
			},
			wantNotes: []string{"rule r: child c0 makes a Role: kgen must hold every permission it grants (add them with rbac.extraRules)"},
		},
		{
			name:  "a parent of unknown scope is granted cluster-wide; its child in its namespace is owned",
			rules: rule("r", "Guess", "    namespaces: [a]\n", "", "ConfigMap"),
			want: []string{
				"* core configmaps " + all,
				"* core events create,patch",
				"* example.com guesses get,list,watch,patch",
				"* example.com guesses/finalizers update",
				"* example.com guesses/status patch",
			},
			wantNotes: []string{"the scope of Guess.example.com is not known: granted cluster-wide; give the CustomResourceDefinition, or the scope, to narrow it"},
		},
		{
			name: "rules merge; a Role leaves out what the ClusterRole grants",
			rules: rule("r1", "App", "    namespaces: [a]\n", "", "ConfigMap") + "---\n" +
				rule("r2", "Plain", "", "", "ConfigMap"),
			want: []string{
				"* core configmaps " + all,
				"* core events create,patch",
				"* example.com plains get,list,watch,patch",
				"* example.com plains/finalizers update",
				"a example.com apps get,list,watch,patch",
				"a example.com apps/finalizers update",
				"a example.com apps/status patch",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loaded, err := rules.Parse("rules.yaml", []byte(tt.rules), rules.Options{})
			if err != nil {
				t.Fatalf("%v\n%s", err, tt.rules)
			}
			p, err := For(loaded, cluster, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			got := lines(p)
			if !tt.crds {
				got = slices.DeleteFunc(got, func(l string) bool { return strings.Contains(l, "customresourcedefinitions") })
			}
			// The get on the parents' namespaces, which every rule
			// limited to namespaces has, is TestForParentNamespaces's.
			got = slices.DeleteFunc(got, isNamespaceGet)
			if p.ManageCRDs != tt.opts.ManageCRDs {
				t.Errorf("ManageCRDs = %v, want %v", p.ManageCRDs, tt.opts.ManageCRDs)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("For() =\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if !slices.Equal(p.Notes, tt.wantNotes) {
				t.Errorf("notes = %q, want %q", p.Notes, tt.wantNotes)
			}
		})
	}
}

// Every rule gets patch on its parents, also one whose children never need
// kgen's finalizer (here a ConfigMap beside its parent): it removes the
// finalizer an earlier version of the rule, or another rule, left on a
// parent, and kgen releases parents of its kind that left every rule. So
// the shards, which patch their label on the parents, need nothing more.
func TestForParentPatch(t *testing.T) {
	loaded, err := rules.Parse("rules.yaml", []byte(rule("r", "App", "    namespaces: [a]\n", "", "ConfigMap")), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if pl, err := loaded[0].Placement(scopesOf(cluster)); err != nil || pl.MayNeedFinalizer() {
		t.Fatalf("MayNeedFinalizer() = true or %v: the rule must not need the finalizer", err)
	}
	want := []string{
		"* core namespaces[a] get",
		"* apiextensions.k8s.io customresourcedefinitions[apps.example.com] get",
		"a core configmaps " + all,
		"a core events create,patch",
		"a example.com apps get,list,watch,patch",
		"a example.com apps/finalizers update",
		"a example.com apps/status patch",
	}
	for _, sharding := range []bool{false, true} {
		t.Run(fmt.Sprintf("sharding=%t", sharding), func(t *testing.T) {
			p, err := For(loaded, cluster, Options{Sharding: sharding})
			if err != nil {
				t.Fatal(err)
			}
			if got := lines(p); !slices.Equal(got, want) {
				t.Errorf("For() =\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

var namespaceGet = regexp.MustCompile(`^\* core namespaces\[[^]]*\] get$`)

func isNamespaceGet(line string) bool { return namespaceGet.MatchString(line) }

// A rule limited to namespaces may get those namespaces, by name, and no
// other; so may one whose children it lets live in other namespaces get
// those: kgen and kgenctl cleanup tell a namespace that was deleted (kgen's
// Role went with it) from one they may not list. A rule of every
// namespace, or of a cluster-scoped parent, has none.
func TestForParentNamespaces(t *testing.T) {
	text := rule("r1", "App", "    namespaces: [a, b]\n", "", "ConfigMap") + "---\n" +
		rule("r2", "App", "    namespaces: [c]\n    selector: {matchLabels: {x: y}}\n", "", "ConfigMap") + "---\n" +
		rule("r3", "Tenant", "    scope: Cluster\n", "", "ConfigMap@${parent.metadata.name}") + "---\n" +
		rule("r4", "App", "    namespaces: [e]\n", "  allowCrossNamespace: [d]\n", "ConfigMap@d")
	loaded, err := rules.Parse("rules.yaml", []byte(text), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := For(loaded, cluster, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := slices.DeleteFunc(lines(p), func(l string) bool { return !isNamespaceGet(l) })
	if want := []string{"* core namespaces[a,b,c,d,e] get"}; !slices.Equal(got, want) {
		t.Errorf("the namespaces' grants = %q, want %q", got, want)
	}
}

// scopesOf answers a Placement's scope questions from a fakeResolver.
type scopesOf fakeResolver

func (s scopesOf) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := fakeResolver(s).Resolve(gvk)
	return m.Scope == kinds.Namespaced, err
}

// Every kind that cannot be resolved is reported, each once.
func TestForUnknownKinds(t *testing.T) {
	// Two rules on one kind must select different parents to load.
	text := rule("r1", "Nope", "    namespaces: [a]\n", "", "Unknown", "ConfigMap") + "---\n" + rule("r2", "Nope", "    namespaces: [b]\n", "", "ConfigMap")
	loaded, err := rules.Parse("rules.yaml", []byte(text), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = For(loaded, cluster, Options{})
	if !errors.Is(err, kinds.ErrUnknownKind) {
		t.Fatalf("For() error = %v, want ErrUnknownKind", err)
	}
	want := "rule r1: parent: unknown kind: Nope\nrule r1: child c0: unknown kind: Unknown"
	if err.Error() != want {
		t.Errorf("For() error:\n%v\nwant:\n%s", err, want)
	}
}
