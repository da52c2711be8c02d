package rules

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// header is the start of a rule document whose children follow from line 7.
const header = `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: r}
spec:
  parent: {apiVersion: example.com/v1, kind: App}
  children:
`

// cm is a valid child template body at the indentation of a child's fields.
func cm(name string) string {
	return "    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"" + name + "\"}\n"
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{
			name: "unknown top-level field",
			yaml: "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspecs: {}\n",
			want: []string{
				`rules.yaml:1:1: rule "r": spec is required`,
				`rules.yaml:4:1: unknown field "specs"`,
			},
		},
		{
			name: "wrong apiVersion and kind",
			yaml: "apiVersion: kgen.dev/v1\nkind: Rules\nmetadata: {name: r}\nspec: {parent: {apiVersion: v1, kind: ConfigMap}, children: [{id: a, template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}}]}\n",
			want: []string{`rules.yaml:1:13: not a rule: apiVersion kgen.dev/v1, kind Rules; every document must be a kgen.dev/v1alpha1 Rule`},
		},
		{
			name: "another kind of object",
			yaml: "apiVersion: example.com/v1\nkind: App\nmetadata: {name: web}\nspec: {image: nginx}\n",
			want: []string{`rules.yaml:1:13: not a rule: apiVersion example.com/v1, kind App; every document must be a kgen.dev/v1alpha1 Rule`},
		},
		{
			name: "no kind",
			yaml: "apiVersion: kgen.dev/v1alpha1\nmetadata: {name: r}\n",
			want: []string{`rules.yaml:1:1: kind is required: every document must be a kgen.dev/v1alpha1 Rule`},
		},
		{
			name: "missing name",
			yaml: "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {}\nspec: {parent: {apiVersion: v1, kind: ConfigMap}, children: [{id: a, template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}}]}\n",
			want: []string{`rules.yaml:3:11: metadata: name is required`},
		},
		{
			name: "name not a label value",
			yaml: "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: my rule}\nspec: {parent: {apiVersion: v1, kind: ConfigMap}, children: [{id: a, template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}}]}\n",
			want: []string{`rules.yaml:3:18: metadata.name: "my rule" must be a valid label value, since children carry it in a label: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
		},
		{
			name: "duplicate rule names",
			yaml: header + "  - id: a\n" + cm("a") + "---\n" + header + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:13:1: rule "r": metadata.name: duplicate rule name: also defined at rules.yaml:1:1`},
		},
		{
			name: "two rules on the same parents",
			yaml: header + "  - id: a\n" + cm("a") + "---\n" + strings.Replace(header, "name: r}", "name: s}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:13:1: rule "s": spec.parent: rule "r" (rules.yaml:1:1) may select the same App.example.com objects: give the rules disjoint namespaces, or selectors that no object matches both of (different values of one label, or a label one requires and the other excludes)`},
		},
		{
			name: "status fields on a built-in parent",
			yaml: "apiVersion: kgen.dev/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  parent: {apiVersion: v1, kind: Namespace}\n  children:\n  - id: a\n    template: {apiVersion: v1, kind: Secret, metadata: {name: a, namespace: x}}\n  status: {x: \"${parent.metadata.name}\"}\n",
			want: []string{`rules.yaml:1:1: rule "r": spec.status: Namespace is a built-in kind: its status belongs to Kubernetes, so a rule cannot add status fields to it`},
		},
		{
			name: "unknown field in parent",
			yaml: strings.Replace(header, "kind: App}", "kind: App, namespace: x}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:51: rule "r": spec.parent: unknown field "namespace"`},
		},
		{
			name: "parent without kind",
			yaml: strings.Replace(header, ", kind: App", "", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:11: rule "r": spec.parent: kind is required`},
		},
		{
			name: "bad parent apiVersion",
			yaml: strings.Replace(header, "example.com/v1", "a/b/c", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:24: rule "r": spec.parent.apiVersion: unexpected GroupVersion string: a/b/c`},
		},
		{
			name: "invalid selector label",
			yaml: strings.Replace(header, "kind: App}", "kind: App, selector: {matchLabels: {tier: \"a b\"}}}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:82: rule "r": spec.parent.selector.matchLabels.tier: invalid label value "a b": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`},
		},
		{
			name: "invalid selector operator",
			yaml: strings.Replace(header, "kind: App}", "kind: App, selector: {matchExpressions: [{key: tier, operator: Is}]}}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:81: rule "r": spec.parent.selector.matchExpressions[0]: "Is" is not a valid label selector operator`},
		},
		{
			name: "invalid namespace",
			yaml: strings.Replace(header, "kind: App}", "kind: App, namespaces: [Team_A]}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:64: rule "r": spec.parent.namespaces[0]: "Team_A" is not a valid namespace name: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`},
		},
		{
			name: "no children",
			yaml: header[:len(header)-1] + " []\n",
			want: []string{`rules.yaml:6:13: rule "r": spec.children: must have at least one child`},
		},
		{
			name: "unknown field in child",
			yaml: header + "  - id: a\n    readywhen: []\n" + cm("a"),
			want: []string{`rules.yaml:8:5: rule "r": spec.children[0]: unknown field "readywhen"`},
		},
		{
			name: "bad child id",
			yaml: header + "  - id: Web-1\n" + cm("a"),
			want: []string{`rules.yaml:7:9: rule "r": spec.children[0].id: child id "Web-1" must match [a-z][a-z0-9_]*`},
		},
		{
			name: "child id ending in underscore",
			yaml: header + "  - id: web_\n" + cm("a"),
			want: []string{`rules.yaml:7:9: rule "r": spec.children[0].id: child id "web_" must be a valid label value (at most 63 characters, not ending in _), since children carry it in a label`},
		},
		{
			name: "duplicate child id",
			yaml: header + "  - id: a\n" + cm("a") + "  - id: a\n" + cm("b"),
			want: []string{`rules.yaml:12:9: rule "r": spec.children[1].id: duplicate child id "a" (first at line 7)`},
		},
		{
			name: "template without apiVersion",
			yaml: header + "  - id: a\n    template: {kind: ConfigMap, metadata: {name: a}}\n",
			want: []string{`rules.yaml:8:15: rule "r": child "a": template: apiVersion is required`},
		},
		{
			name: "template kind is an expression",
			yaml: header + "  - id: a\n    template: {apiVersion: v1, kind: \"${parent.spec.kind}\", metadata: {name: a}}\n",
			want: []string{`rules.yaml:8:38: rule "r": child "a": template.kind: must be a literal, not an expression: kgen watches children by kind, so kinds must be known when the rules load`},
		},
		{
			name: "a kind the core group does not have",
			yaml: header + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMapp, metadata: {name: a}}\n",
			want: []string{`rules.yaml:8:38: rule "r": child "a": template.kind: the core group (v1) has no kind "ConfigMapp": did you mean "ConfigMap"?`},
		},
		{
			name: "a kind a built-in group does not have",
			yaml: header + "  - id: a\n    template: {apiVersion: apps/v1, kind: Deploy, metadata: {name: a}}\n",
			want: []string{`rules.yaml:8:43: rule "r": child "a": template.kind: apps has no kind "Deploy"`},
		},
		{
			name: "template without name",
			yaml: header + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {labels: {a: b}}}\n",
			want: []string{`rules.yaml:8:59: rule "r": child "a": template.metadata: name is required`},
		},
		{
			name: "template sets ownerReferences",
			yaml: header + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, ownerReferences: []}}\n",
			want: []string{`rules.yaml:8:69: rule "r": child "a": template.metadata.ownerReferences: must not be set: kgen manages it`},
		},
		{
			name: "namespace allowed by allowCrossNamespace",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowCrossNamespace: [kube-system]\n", 1) + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: kube-system}}\n",
			want: nil,
		},
		{
			name: "a namespace expression with allowCrossNamespace",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowCrossNamespace: [a, b]\n", 1) + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: \"${parent.spec.ns}\"}}\n",
			want: nil,
		},
		{
			name: "a literal namespace outside allowCrossNamespace",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowCrossNamespace: [a, b]\n", 1) + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: kube-system}}\n",
			want: []string{`rules.yaml:9:80: rule "r": child "a": template.metadata.namespace: "kube-system" is not in spec.allowCrossNamespace (a, b): add it there`},
		},
		{
			name: "allowCrossNamespace: true",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowCrossNamespace: true\n", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:24: rule "r": spec.allowCrossNamespace: true is not accepted: list the namespaces the children may be in, as in allowCrossNamespace: [ns-a, ns-b] (a cluster-scoped parent needs no list: set spec.parent.scope: Cluster)`},
		},
		{
			name: "allowCrossNamespace: false",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowCrossNamespace: false\n", 1) + "  - id: a\n" + cm("a"),
			want: nil,
		},
		{
			name: "allowCrossNamespace with invalid names",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowCrossNamespace: [a, Bad, a, '${x}']\n", 1) + "  - id: a\n" + cm("a"),
			want: []string{
				`rules.yaml:5:28: rule "r": spec.allowCrossNamespace[1]: "Bad" is not a valid namespace name: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
				`rules.yaml:5:33: rule "r": spec.allowCrossNamespace[2]: duplicate namespace "a"`,
				`rules.yaml:5:36: rule "r": spec.allowCrossNamespace[3]: must be a literal namespace, not an expression`,
			},
		},
		{
			name: "any namespace for a cluster-scoped parent",
			yaml: strings.Replace(header, "kind: App}", "kind: App, scope: Cluster}", 1) + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: \"team-${parent.metadata.name}\"}}\n",
			want: nil,
		},
		{
			name: "a built-in cluster-scoped parent",
			yaml: strings.Replace(header, "apiVersion: example.com/v1, kind: App}", "apiVersion: v1, kind: Namespace}", 1) + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: \"${parent.metadata.name}\"}}\n",
			want: nil,
		},
		{
			name: "a namespaced child of a cluster-scoped parent without a namespace",
			yaml: strings.Replace(header, "apiVersion: example.com/v1, kind: App}", "apiVersion: v1, kind: Namespace}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:11:17: rule "r": child "a": template.metadata: namespace is required: the parent is cluster-scoped, so a ConfigMap must name its namespace`},
		},
		{
			name: "a computed role binding without allowBindRoles",
			yaml: header + "  - id: a\n    template: {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, metadata: {name: a}, roleRef: {kind: ClusterRole, name: '${parent.spec.role}'}}\n",
			want: []string{`rules.yaml:8:133: rule "r": child "a": template.roleRef.name: the role is computed by an expression: list the roles it may name in spec.allowBindRoles, so that kgen may bind those and no other`},
		},
		{
			name: "a whole computed roleRef without allowBindRoles",
			yaml: header + "  - id: a\n    template: {apiVersion: rbac.authorization.k8s.io/v1, kind: ClusterRoleBinding, metadata: {name: a}, roleRef: '${parent.spec.roleRef}'}\n",
			want: []string{`rules.yaml:8:114: rule "r": child "a": template.roleRef: the role is computed by an expression: list the roles it may name in spec.allowBindRoles, so that kgen may bind those and no other`},
		},
		{
			name: "a computed role binding with allowBindRoles, and a literal one",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowBindRoles: [view]\n", 1) + "  - id: a\n    template: {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, metadata: {name: a}, roleRef: {kind: ClusterRole, name: '${parent.spec.role}'}}\n" +
				"  - id: b\n    template: {apiVersion: rbac.authorization.k8s.io/v1, kind: RoleBinding, metadata: {name: b}, roleRef: {kind: ClusterRole, name: admin}}\n",
			want: nil,
		},
		{
			name: "allowBindRoles with bad names",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowBindRoles: [view, view, 'a/b', '${x}']\n", 1) + "  - id: a\n" + cm("a"),
			want: []string{
				`rules.yaml:5:26: rule "r": spec.allowBindRoles[1]: duplicate role "view"`,
				`rules.yaml:5:32: rule "r": spec.allowBindRoles[2]: "a/b" is not a valid role name: may not contain '/'`,
				`rules.yaml:5:39: rule "r": spec.allowBindRoles[3]: must be the literal name of a role`,
			},
		},
		{
			name: "a scope that is not one",
			yaml: strings.Replace(header, "kind: App}", "kind: App, scope: Global}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:58: rule "r": spec.parent.scope: must be Namespaced or Cluster`},
		},
		{
			name: "a scope that is not a built-in kind's",
			yaml: strings.Replace(header, "apiVersion: example.com/v1, kind: App}", "apiVersion: v1, kind: ConfigMap, scope: Cluster}", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:52: rule "r": spec.parent.scope: ConfigMap is a built-in kind, and it is not Cluster`},
		},
		{
			name: "the parent's namespace",
			yaml: header + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: \"${ parent.metadata.namespace }\"}}\n",
			want: nil,
		},
		{
			name: "namespace other than the parent's",
			yaml: header + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: kube-system}}\n",
			want: []string{`rules.yaml:8:80: rule "r": child "a": template.metadata.namespace: must be absent or exactly ${parent.metadata.namespace}, unless the rule lists the namespaces it allows in spec.allowCrossNamespace, or its parent is cluster-scoped (spec.parent.scope: Cluster)`},
		},
		{
			name: "namespace expression other than the parent's",
			yaml: header + "  - id: a\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: \"${parent.spec.ns}\"}}\n",
			want: []string{`rules.yaml:8:80: rule "r": child "a": template.metadata.namespace: must be absent or exactly ${parent.metadata.namespace}, unless the rule lists the namespaces it allows in spec.allowCrossNamespace, or its parent is cluster-scoped (spec.parent.scope: Cluster)`},
		},
		{
			name: "syntax error",
			yaml: header + "  - id: a\n" + cm("${parent.metadata.name +}"),
			want: []string{`rules.yaml:11:49: rule "r": child "a": template.metadata.name: ${parent.metadata.name +}: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}`},
		},
		{
			name: "unknown variable",
			yaml: header + "  - id: a\n" + cm("${parnt.metadata.name}"),
			want: []string{`rules.yaml:11:27: rule "r": child "a": template.metadata.name: ${parnt.metadata.name}: undeclared reference to 'parnt' (in container '')`},
		},
		{
			name: "type error",
			yaml: header + "  - id: a\n" + cm("x-${1 + 'a'}"),
			want: []string{`rules.yaml:11:31: rule "r": child "a": template.metadata.name: ${1 + 'a'}: found no matching overload for '_+_' applied to '(int, string)'`},
		},
		{
			name: "self outside readyWhen",
			yaml: header + "  - id: a\n" + cm("${self.metadata.name}"),
			want: []string{`rules.yaml:11:27: rule "r": child "a": template.metadata.name: ${self.metadata.name}: undeclared reference to 'self' (in container '')`},
		},
		{
			name: "includeWhen not a bool",
			yaml: header + "  - id: a\n    includeWhen: [\"${parent.metadata.name + 'x'}\"]\n" + cm("a"),
			want: []string{`rules.yaml:8:20: rule "r": child "a": includeWhen[0]: ${parent.metadata.name + 'x'}: must be a bool expression, but its type is string`},
		},
		{
			name: "includeWhen with text",
			yaml: header + "  - id: a\n    includeWhen: [\"is ${true}\"]\n" + cm("a"),
			want: []string{`rules.yaml:8:19: rule "r": child "a": includeWhen[0]: must be exactly one "${...}" expression, with no text around it`},
		},
		{
			name: "readyWhen not a string",
			yaml: header + "  - id: a\n    readyWhen: [true]\n" + cm("a"),
			want: []string{`rules.yaml:8:17: rule "r": child "a": readyWhen[0]: must be a string holding one "${...}" expression`},
		},
		{
			name: "children without id",
			yaml: header + "  - id: a\n" + cm("${string(size(children))}"),
			want: []string{`rules.yaml:11:25: rule "r": child "a": template.metadata.name: ${string(size(children))}: children must be followed by a child id, as in children.config or children["config"]`},
		},
		{
			name: "unknown child id",
			yaml: header + "  - id: a\n" + cm("${children.b.metadata.name}"),
			want: []string{`rules.yaml:11:25: rule "r": child "a": template.metadata.name: ${children.b.metadata.name}: unknown child id "b" in children.b (the rule's children are: a)`},
		},
		{
			name: "unknown child id in readyWhen",
			yaml: header + "  - id: a\n    readyWhen: [\"${has(children.zz.status)}\"]\n" + cm("a"),
			want: []string{`rules.yaml:8:18: rule "r": child "a": readyWhen[0]: ${has(children.zz.status)}: unknown child id "zz" in children.zz (the rule's children are: a)`},
		},
		{
			name: "unknown child id in status",
			yaml: header + "  - id: a\n" + cm("a") + "  status:\n    x: ${children['b'].metadata.name}\n",
			want: []string{`rules.yaml:13:8: rule "r": spec.status.x: ${children['b'].metadata.name}: unknown child id "b" in children.b (the rule's children are: a)`},
		},
		{
			name: "cycle",
			yaml: header + "  - id: a\n" + cm("${children.b.metadata.name}") + "  - id: b\n" + cm("${children.a.metadata.name}"),
			want: []string{`rules.yaml:7:5: rule "r": child "a": dependency cycle: a -> b -> a`},
		},
		{
			name: "cycle through includeWhen",
			yaml: header + "  - id: a\n" + cm("a") + "  - id: b\n    includeWhen: [\"${has(children.c.data)}\"]\n" + cm("b") + "  - id: c\n" + cm("${children.b.metadata.name}"),
			want: []string{`rules.yaml:12:5: rule "r": child "b": dependency cycle: b -> c -> b`},
		},
		{
			name: "cycle next to another error",
			yaml: header + "  - id: a\n" + cm("${children.b.metadata.name}") + "  - id: b\n" + cm("${children.a.metadata.name}") + "  - id: c\n" + cm("${children.zz.metadata.name}"),
			want: []string{
				`rules.yaml:7:5: rule "r": child "a": dependency cycle: a -> b -> a`,
				`rules.yaml:21:25: rule "r": child "c": template.metadata.name: ${children.zz.metadata.name}: unknown child id "zz" in children.zz (the rule's children are: a, b, c)`,
			},
		},
		{
			name: "child reads itself",
			yaml: header + "  - id: a\n" + cm("${children.a.metadata.name}"),
			want: []string{`rules.yaml:7:5: rule "r": child "a": dependency cycle: a -> a`},
		},
		{
			name: "unterminated expression",
			yaml: header + "  - id: a\n" + cm("x-${parent.metadata.name"),
			want: []string{`rules.yaml:11:27: rule "r": child "a": template.metadata.name: unterminated ${: no closing "}"`},
		},
		{
			name: "empty expression",
			yaml: header + "  - id: a\n" + cm("${ }"),
			want: []string{`rules.yaml:11:25: rule "r": child "a": template.metadata.name: empty expression ${}`},
		},
		{
			name: "expression in a key",
			yaml: header + "  - id: a\n" + cm("a") + "      data: {\"${parent.metadata.name}\": x}\n",
			want: []string{`rules.yaml:12:14: rule "r": child "a": template.data: key "${parent.metadata.name}": keys cannot hold expressions (write $${ for a literal "${")`},
		},
		{
			name: "duplicate key",
			yaml: header + "  - id: a\n" + cm("a") + "      data: {x: a, x: b}\n",
			want: []string{`rules.yaml:12:20: rule "r": child "a": template.data: duplicate key "x" (first at line 12)`},
		},
		{
			name: "reserved status field",
			yaml: header + "  - id: a\n" + cm("a") + "  status:\n    conditions: []\n",
			want: []string{`rules.yaml:13:5: rule "r": spec.status: status field "conditions" is written by kgen itself`},
		},
		{
			name: "allowCrossNamespace not a list",
			yaml: strings.Replace(header, "spec:\n", "spec:\n  allowCrossNamespace: \"yes\"\n", 1) + "  - id: a\n" + cm("a"),
			want: []string{`rules.yaml:5:24: rule "r": spec.allowCrossNamespace: must be a list of namespaces, as in allowCrossNamespace: [ns-a, ns-b]`},
		},
		{
			name: "YAML syntax error",
			yaml: "apiVersion: kgen.dev/v1alpha1\nkind: Rule\n  metadata: {}\n",
			want: []string{`rules.yaml:3: yaml: mapping values are not allowed in this context`},
		},
		{
			name: "not a mapping",
			yaml: "- a\n- b\n",
			want: []string{`rules.yaml:1:1: a rule must be a mapping with apiVersion, kind, metadata and spec`},
		},
		{
			name: "two children, one object",
			yaml: header + "  - id: a\n" + cm("${parent.metadata.name}-x") + "  - id: b\n" + cm("${parent.metadata.name}-x"),
			want: []string{`rules.yaml:16:24: rule "r": child "b": template.metadata.name: renders the same ConfigMap as child "a" (line 7): give each child a name of its own`},
		},
		{
			name: "two children, one object in the parent's namespace, said two ways",
			yaml: header + "  - id: a\n" + cm("x") + "  - id: b\n" + strings.Replace(cm("x"), "{name: ", "{namespace: \"${parent.metadata.namespace}\", name: ", 1),
			want: []string{`rules.yaml:16:67: rule "r": child "b": template.metadata.name: renders the same ConfigMap as child "a" (line 7): give each child a name of its own`},
		},
		{
			name: "several errors at once",
			yaml: header + "  - id: a\n" + cm("${parnt}") + "  - id: A\n" + cm("${1 + 'a'}"),
			want: []string{
				`rules.yaml:11:27: rule "r": child "a": template.metadata.name: ${parnt}: undeclared reference to 'parnt' (in container '')`,
				`rules.yaml:12:9: rule "r": spec.children[1].id: child id "A" must match [a-z][a-z0-9_]*`,
				`rules.yaml:16:29: rule "r": spec.children[1].template.metadata.name: ${1 + 'a'}: found no matching overload for '_+_' applied to '(int, string)'`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.yaml), Options{})
			var got []string
			var list ErrorList
			if err != nil && !errors.As(err, &list) {
				t.Fatalf("Parse() error is a %T, not an ErrorList: %v", err, err)
			}
			for _, e := range list {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Parse() errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		paths   []string
		want    []string
		wantErr string
	}{
		{
			name:  "file",
			paths: []string{"testdata/webapp.yaml"},
			want:  []string{"webapp"},
		},
		{
			name:  "directory: *.yaml and *.yml in name order, other files ignored",
			paths: []string{"testdata/dir"},
			want:  []string{"webapp", "first", "second"},
		},
		{
			name:    "the same rule twice",
			paths:   []string{"testdata/webapp.yaml", "testdata/dir"},
			wantErr: `testdata/dir/a-webapp.yaml:1:1: rule "webapp": metadata.name: duplicate rule name: also defined at testdata/webapp.yaml:1:1`,
		},
		{
			name:    "missing file",
			paths:   []string{"testdata/nope.yaml"},
			wantErr: "testdata/nope.yaml: no such file or directory",
		},
		{
			name:    "directory without rules",
			paths:   []string{"testdata/empty"},
			wantErr: "testdata/empty: the directory has no *.yaml or *.yml files",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.paths, Options{})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("Load(%v) error:\n%v\nwant:\n%s", tt.paths, err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("Load(%v) returned rules with an error", tt.paths)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load(%v) error: %v", tt.paths, err)
			}
			var names []string
			for _, r := range got {
				names = append(names, r.Name)
			}
			if strings.Join(names, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Load(%v) = %v, want %v", tt.paths, names, tt.want)
			}
		})
	}
}

// A ConfigMap mounted as a volume is a directory of symlinks into a hidden
// "..data" directory, itself a symlink; its files are rules files.
func TestLoadConfigMapVolume(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/webapp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.000000000")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ts, "webapp.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, link := range [][2]string{{filepath.Base(ts), "..data"}, {"..data/webapp.yaml", "webapp.yaml"}} {
		if err := os.Symlink(link[0], filepath.Join(dir, link[1])); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Load([]string{dir}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "webapp" {
		t.Errorf("Load(volume) = %d rules, want the webapp rule", len(got))
	}
}

// A symlink to a file that is gone (the kubelet leaves one for a moment
// when a key leaves the ConfigMap) is named in the error, not the
// directory, which exists.
func TestFilesDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/gone.yaml", filepath.Join(dir, "gone.yaml")); err != nil {
		t.Fatal(err)
	}
	for name, files := range map[string]func([]string) ([]string, error){"Files": Files, "FilesOrNone": FilesOrNone} {
		_, err := files([]string{dir})
		if want := dir + `: gone.yaml is a symlink to "..data/gone.yaml", which cannot be read: no such file or directory`; err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", name, err, want)
		}
	}
}

func TestParsedRule(t *testing.T) {
	doc := `apiVersion: kgen.dev/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  parent:
    apiVersion: example.com/v1
    kind: App
    selector:
      matchLabels: {tier: web}
      matchExpressions: [{key: env, operator: In, values: [prod, staging]}]
    namespaces: [team-a, team-b]
  children:
  - id: deployment
    includeWhen: ["${has(children.config.data)}"]
    readyWhen: ["${self.status.ready && has(children.service.spec)}"]
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: "${children.config.metadata.name}"}
  - id: service
    template: {apiVersion: v1, kind: Service, metadata: {name: x}}
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "${children.service.metadata.name}"}}
  status:
    a: ${children.deployment.metadata.name}
    b: {c: "${children['config'].metadata.name}"}
`
	rules, err := Parse("rules.yaml", []byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rules[0]
	if want := (schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "App"}); r.Parent.GroupVersionKind != want {
		t.Errorf("parent GVK = %v, want %v", r.Parent.GroupVersionKind, want)
	}
	if got, want := r.Parent.Selector.String(), "env in (prod,staging),tier=web"; got != want {
		t.Errorf("selector = %q, want %q", got, want)
	}
	if got, want := r.Parent.Namespaces, []string{"team-a", "team-b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("namespaces = %v, want %v", got, want)
	}
	var order []string
	for _, c := range r.Order() {
		order = append(order, c.ID)
	}
	if got, want := order, []string{"service", "config", "deployment"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Order() = %v, want %v", got, want)
	}
	deps := map[string][]string{}
	for _, c := range r.Children {
		deps[c.ID] = c.DependsOn
	}
	// readyWhen's reference to service is checked but is no dependency.
	if want := map[string][]string{"deployment": {"config"}, "service": nil, "config": {"service"}}; !reflect.DeepEqual(deps, want) {
		t.Errorf("DependsOn = %v, want %v", deps, want)
	}
	if got, want := r.Child("deployment").GroupVersionKind, (schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}); got != want {
		t.Errorf("child GVK = %v, want %v", got, want)
	}
	if got := r.Child("nope"); got != nil {
		t.Errorf("Child(nope) = %v, want nil", got)
	}
	var status []string
	for _, f := range r.Status {
		status = append(status, f.Name+":"+strings.Join(f.Value.References(), ","))
	}
	if got, want := status, []string{"a:deployment", "b:config"}; !reflect.DeepEqual(got, want) {
		t.Errorf("status fields = %v, want %v", got, want)
	}
}

func TestSelects(t *testing.T) {
	rules, err := Load([]string{"testdata/webapp.yaml"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rules[0]
	obj := func(apiVersion, kind, ns string, labels map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		u.SetNamespace(ns)
		u.SetName("x")
		u.SetLabels(labels)
		return u
	}
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want bool
		// inAnyVersion is what SelectsInAnyVersion says, if not want.
		inAnyVersion *bool
	}{
		{name: "match", obj: obj("example.com/v1alpha1", "WebApp", "team-a", map[string]string{"tier": "web"}), want: true},
		{name: "other version", obj: obj("example.com/v1", "WebApp", "team-a", map[string]string{"tier": "web"}), inAnyVersion: new(true)},
		{name: "other version, other namespace", obj: obj("example.com/v1", "WebApp", "team-b", map[string]string{"tier": "web"})},
		{name: "other group", obj: obj("other.example.com/v1alpha1", "WebApp", "team-a", map[string]string{"tier": "web"})},
		{name: "other kind", obj: obj("example.com/v1alpha1", "App", "team-a", map[string]string{"tier": "web"})},
		{name: "other namespace", obj: obj("example.com/v1alpha1", "WebApp", "team-b", map[string]string{"tier": "web"})},
		{name: "labels do not match", obj: obj("example.com/v1alpha1", "WebApp", "team-a", map[string]string{"tier": "db"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Selects(tt.obj); got != tt.want {
				t.Errorf("Selects() = %t, want %t", got, tt.want)
			}
			want := tt.want
			if tt.inAnyVersion != nil {
				want = *tt.inAnyVersion
			}
			if got := r.SelectsInAnyVersion(tt.obj); got != want {
				t.Errorf("SelectsInAnyVersion() = %t, want %t", got, want)
			}
		})
	}
}

func TestAliasBomb(t *testing.T) {
	doc := header + "  - id: a\n" + cm("a") + `      data:
        a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]
        b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
        c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
        d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
        e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
        f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
        g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
        h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
`
	_, err := Parse("rules.yaml", []byte(doc), Options{})
	if err == nil || !strings.Contains(err.Error(), "the document expands to more than 100000 YAML nodes") {
		t.Fatalf("Parse() error = %v, want one about the document's size", err)
	}
}

// Two children with one name are an error at load only when both are always
// rendered. A child whose dependency has an includeWhen is left out with
// it, so two such children may share a name (one route for the blue
// deployment, one for the green); on an always rendered dependency they may
// not.
func TestSameObjectThroughDependencies(t *testing.T) {
	data := func(of string) string {
		return "      data: {target: \"${children." + of + ".metadata.name}\"}\n"
	}
	doc := func(includeWhen bool) string {
		blue, green := "", ""
		if includeWhen {
			blue = "    includeWhen: [\"${parent.spec.color == 'blue'}\"]\n"
			green = "    includeWhen: [\"${parent.spec.color == 'green'}\"]\n"
		}
		return header +
			"  - id: blue\n" + blue + cm("${parent.metadata.name}-blue") +
			"  - id: green\n" + green + cm("${parent.metadata.name}-green") +
			"  - id: route_blue\n" + cm("${parent.metadata.name}-route") + data("blue") +
			"  - id: route_green\n" + cm("${parent.metadata.name}-route") + data("green")
	}
	if _, err := Parse("rules.yaml", []byte(doc(true)), Options{}); err != nil {
		t.Errorf("children left out with their includeWhen dependencies: %v", err)
	}
	_, err := Parse("rules.yaml", []byte(doc(false)), Options{})
	if want := `child "route_green": template.metadata.name: renders the same ConfigMap as child "route_blue"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("children always rendered: error %v, want one saying %s", err, want)
	}
}

// Reading a forEach child does not make a child possibly left out: Render
// leaves a forEach child out only through its includeWhen, so two children
// that read one and share a name always collide.
func TestSameObjectThroughForEach(t *testing.T) {
	doc := header +
		"  - id: items\n    forEach: [{i: \"${['a', 'b']}\"}]\n" + cm("${parent.metadata.name}-${i}") +
		"  - id: route_a\n" + cm("route") + "      data: {n: \"${string(size(children.items))}\"}\n" +
		"  - id: route_b\n" + cm("route") + "      data: {n: \"${string(size(children.items))}\"}\n"
	_, err := Parse("rules.yaml", []byte(doc), Options{})
	if want := `child "route_b": template.metadata.name: renders the same ConfigMap as child "route_a"`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one saying %s", err, want)
	}
}
