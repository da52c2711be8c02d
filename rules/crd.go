package rules

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/cel-go/common/types"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"kgen.dev/kgen/pkg/kinds"
)

// objectSchema is the OpenAPI v3 schema of a whole parent object: its spec
// from spec.parent.schema, and a status of kgen's fields and the given ones.
func (p Parent) objectSchema(status []*StatusField) *apiextensionsv1.JSONSchemaProps {
	return &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec":   *p.Schema,
			"status": statusSchema(status),
		},
	}
}

// statusSchema is the schema of a parent's status: observedGeneration, the
// conditions (a list keyed by type, as metav1.Condition), and each status
// field, typed where its template's type is known when it loads and any
// value otherwise.
func statusSchema(fields []*StatusField) apiextensionsv1.JSONSchemaProps {
	mapType := "map"
	props := map[string]apiextensionsv1.JSONSchemaProps{
		"observedGeneration": {Type: "integer", Format: "int64"},
		"conditions": {
			Type:         "array",
			XListType:    &mapType,
			XListMapKeys: []string{"type"},
			Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
				Type:     "object",
				Required: []string{"type", "status", "lastTransitionTime", "reason", "message"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"type":               {Type: "string", MaxLength: ptr(int64(316))},
					"status":             {Type: "string", Enum: jsonStrings("True", "False", "Unknown")},
					"reason":             {Type: "string", MaxLength: ptr(int64(1024))},
					"message":            {Type: "string", MaxLength: ptr(int64(32768))},
					"lastTransitionTime": {Type: "string", Format: "date-time"},
					"observedGeneration": {Type: "integer", Format: "int64", Minimum: ptr(0.0)},
				},
			}},
		},
	}
	for _, f := range fields {
		props[f.Name] = valueSchema(f.Value.root)
	}
	return apiextensionsv1.JSONSchemaProps{Type: "object", Properties: props}
}

// valueSchema is the schema of a template's values: a scalar's type where
// it is known when the rules load, any value otherwise.
func valueSchema(n *node) apiextensionsv1.JSONSchemaProps {
	preserve := true
	anything := apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: &preserve}
	switch n.kind {
	case textNode:
		return apiextensionsv1.JSONSchemaProps{Type: "string"}
	case literalNode:
		switch n.lit.(type) {
		case string:
			return apiextensionsv1.JSONSchemaProps{Type: "string"}
		case int64:
			return apiextensionsv1.JSONSchemaProps{Type: "integer"}
		case float64:
			return apiextensionsv1.JSONSchemaProps{Type: "number"}
		case bool:
			return apiextensionsv1.JSONSchemaProps{Type: "boolean"}
		}
	case mapNode:
		return apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}
	case exprNode:
		switch t := n.expr.outputType; {
		case t == nil:
		case t.Kind() == types.StringKind:
			return apiextensionsv1.JSONSchemaProps{Type: "string"}
		case t.Kind() == types.IntKind || t.Kind() == types.UintKind:
			return apiextensionsv1.JSONSchemaProps{Type: "integer"}
		case t.Kind() == types.BoolKind:
			return apiextensionsv1.JSONSchemaProps{Type: "boolean"}
		case t.Kind() == types.DoubleKind:
			return apiextensionsv1.JSONSchemaProps{Type: "number"}
		}
	}
	return anything
}

func ptr[T any](v T) *T { return &v }

func jsonStrings(values ...string) []apiextensionsv1.JSON {
	out := make([]apiextensionsv1.JSON, len(values))
	for i, v := range values {
		out[i] = apiextensionsv1.JSON{Raw: []byte(`"` + v + `"`)}
	}
	return out
}

// CRD returns the CustomResourceDefinition of the rule's parent kind, ready
// to be applied (it has no status), built from spec.parent.schema: one
// version, served and stored, with a status
// subresource, the spec's schema and a status schema of kgen's fields
// (observedGeneration, conditions) and the rule's status fields. The scope
// is spec.parent.scope, Namespaced by default; the plural is the kind in
// lower case made plural by English rules (Policy: policies). It is an
// error for a rule without spec.parent.schema.
func (r *Rule) CRD() (*unstructured.Unstructured, error) {
	if r.Parent.Schema == nil {
		return nil, fmt.Errorf("rule %q has no spec.parent.schema to build a CustomResourceDefinition from", r.Name)
	}
	gvk := r.Parent.GroupVersionKind
	if gvk.Group == "" {
		return nil, fmt.Errorf("rule %q: a CustomResourceDefinition needs an API group: spec.parent.apiVersion is %q", r.Name, gvk.GroupVersion())
	}
	singular := strings.ToLower(gvk.Kind)
	plural := Plural(singular)
	scope := apiextensionsv1.NamespaceScoped
	if r.Parent.Scope == kinds.Cluster {
		scope = apiextensionsv1.ClusterScoped
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"},
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + gvk.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: gvk.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Kind: gvk.Kind, ListKind: gvk.Kind + "List", Plural: plural, Singular: singular,
			},
			Scope: scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: gvk.Version, Served: true, Storage: true,
				Schema:       &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: r.Parent.objectSchema(r.Status)},
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			}},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return nil, fmt.Errorf("rule %q: %w", r.Name, err)
	}
	delete(obj, "status")
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	return &unstructured.Unstructured{Object: obj}, nil
}

// Plural makes a lower-case English noun plural, as Kubernetes names
// resources: "webapp" → "webapps", "policy" → "policies", "class" →
// "classes".
func Plural(s string) string {
	switch {
	case strings.HasSuffix(s, "s"), strings.HasSuffix(s, "x"), strings.HasSuffix(s, "z"),
		strings.HasSuffix(s, "ch"), strings.HasSuffix(s, "sh"):
		return s + "es"
	case strings.HasSuffix(s, "y") && len(s) > 1 && !strings.ContainsRune("aeiou", rune(s[len(s)-2])):
		return s[:len(s)-1] + "ies"
	}
	return s + "s"
}

// CheckCRDs checks a set of rules whose parent kinds' CRDs kgen makes
// (kgenctl run --manage-crds, kgenctl crd): one CRD serves a kind, so two
// rules that describe one kind with spec.parent.schema must build the
// same CRD. Otherwise each would apply its own in turn, the last would
// win, and the other rule's parents would be refused the fields its schema
// promised. An error names the later rule of a pair, in the order given.
// Without --manage-crds the schema only types the rule's expressions, and
// two rules may describe one kind differently.
func CheckCRDs(rules []*Rule) ErrorList {
	var errs ErrorList
	type described struct {
		rule *Rule
		crd  map[string]any
	}
	first := map[schema.GroupKind]described{}
	for _, r := range rules {
		if r.Parent.Schema == nil {
			continue
		}
		crd, err := r.CRD()
		if err != nil {
			continue // an error where the CRD is made
		}
		gk := r.Parent.GroupVersionKind.GroupKind()
		normalized := sortedRequired(crd.Object).(map[string]any)
		f, ok := first[gk]
		if !ok {
			first[gk] = described{r, normalized}
			continue
		}
		if !reflect.DeepEqual(f.crd, normalized) {
			errs = append(errs, &Error{Pos: r.Pos, Rule: r.Name, Field: "spec.parent.schema",
				Err: fmt.Errorf("rule %q (%s) describes %s too, with another CustomResourceDefinition (its schema, version, scope or status fields differ): one CRD serves the kind, so describe it alike in both rules, or in one only", f.rule.Name, f.rule.Pos, gk)})
		}
	}
	return errs
}

// sortedRequired returns a copy of a JSON value with every "required"
// list of names sorted: their order does not change what a schema means.
func sortedRequired(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			if names, ok := e.([]any); ok && k == "required" {
				sorted := slices.Clone(names)
				slices.SortFunc(sorted, func(a, b any) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
				out[k] = sorted
				continue
			}
			out[k] = sortedRequired(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = sortedRequired(e)
		}
		return out
	}
	return v
}
