package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	apiservercel "k8s.io/apiserver/pkg/cel"

	kschema "kgen.dev/kgen/pkg/schema"
)

// Typed expressions: when the parent's schema is known, parent is declared
// with the CEL type Kubernetes derives from it for CRD validation rules
// (model.SchemaDeclType), so the checker rejects a path that is not in the
// schema and an operation on the wrong type. Three changes keep that type
// true of the objects kgen sees at run time, which are plain JSON values
// rather than the API server's typed ones:
//
//   - metadata has every ObjectMeta field (Kubernetes exposes only name and
//     generateName to validation rules), with timestamps as strings;
//   - x-kubernetes-preserve-unknown-fields and embedded-resource subtrees,
//     numbers (a JSON 1 is an int at run time) and fields without a type are
//     dyn: checked when the expression runs, as without a schema;
//   - formats are ignored: a date-time is the string the object holds.

// parentType returns the CEL declaration of the parent's type from its
// OpenAPI v3 schema as a CRD declares it; nil when the schema allows any
// object.
func parentType(props *apiextensionsv1.JSONSchemaProps) (*apiservercel.DeclType, error) {
	internal := &apiextensions.JSONSchemaProps{}
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(props, internal, nil); err != nil {
		return nil, fmt.Errorf("the parent's schema: %w", err)
	}
	s, err := structuralschema.NewStructural(internal)
	if err != nil {
		return nil, fmt.Errorf("the parent's schema is not structural: %w", err)
	}
	return structuralParentType(s)
}

// publishedParentType returns the CEL declaration of the parent's type
// from the shape the API server publishes of a kind; nil when it allows
// any object.
func publishedParentType(t *kschema.Type) (*apiservercel.DeclType, error) {
	return structuralParentType(typeStructural(t, map[*kschema.Type]bool{}))
}

// structuralParentType returns the CEL declaration of the parent's type
// from its structural schema; nil when it allows any object.
func structuralParentType(s *structuralschema.Structural) (*apiservercel.DeclType, error) {
	if s.XPreserveUnknownFields || s.XEmbeddedResource {
		return nil, nil // any object: nothing to check
	}
	if s.Type != "object" {
		return nil, fmt.Errorf("the parent's schema is of type %q, not object", s.Type)
	}
	root := dynamicWhereUnknown(s)
	if root.Properties == nil {
		root.Properties = map[string]structuralschema.Structural{}
	}
	root.Properties["apiVersion"] = stringSchema
	root.Properties["kind"] = stringSchema
	root.Properties["metadata"] = objectMetaSchema()
	t := model.SchemaDeclType(root, false)
	if t == nil {
		return nil, fmt.Errorf("the parent's schema has no CEL type")
	}
	return t.MaybeAssignTypeName("kgen.parent"), nil
}

var stringSchema = structuralschema.Structural{Generic: structuralschema.Generic{Type: "string"}}

var dynSchema = structuralschema.Structural{Extensions: structuralschema.Extensions{XIntOrString: true}}

// dynamicWhereUnknown copies a structural schema, making dyn what the
// objects do not type exactly (see the comment above).
func dynamicWhereUnknown(s *structuralschema.Structural) *structuralschema.Structural {
	if s.XPreserveUnknownFields || s.XEmbeddedResource || s.XIntOrString || s.Type == "number" || s.Type == "" {
		d := dynSchema
		return &d
	}
	out := &structuralschema.Structural{Generic: structuralschema.Generic{Type: s.Type, Nullable: s.Nullable}}
	if s.Items != nil {
		out.Items = dynamicWhereUnknown(s.Items)
	}
	if s.AdditionalProperties != nil {
		out.AdditionalProperties = &structuralschema.StructuralOrBool{Bool: s.AdditionalProperties.Bool}
		if s.AdditionalProperties.Structural != nil {
			out.AdditionalProperties.Structural = dynamicWhereUnknown(s.AdditionalProperties.Structural)
		}
	}
	if s.Properties != nil {
		out.Properties = make(map[string]structuralschema.Structural, len(s.Properties))
		for name, p := range s.Properties {
			out.Properties[name] = *dynamicWhereUnknown(&p)
		}
	}
	return out
}

// typeStructural converts a published shape into a structural schema. What
// it cannot type exactly becomes dyn (see dynamicWhereUnknown): a union (an
// IntOrString, a Quantity), a value of any type, an object whose schema
// names no field (a RawExtension), and a recursive type below its first
// level.
func typeStructural(t *kschema.Type, onPath map[*kschema.Type]bool) *structuralschema.Structural {
	anything := &structuralschema.Structural{Extensions: structuralschema.Extensions{XPreserveUnknownFields: true}}
	if t == nil || onPath[t] {
		return anything
	}
	onPath[t] = true
	defer delete(onPath, t)
	out := &structuralschema.Structural{Extensions: structuralschema.Extensions{
		XPreserveUnknownFields: t.PreserveUnknownFields, XEmbeddedResource: t.EmbeddedResource,
	}}
	switch {
	case len(t.Types) == 1:
		out.Type = t.Types[0]
	case len(t.Types) > 1:
		out.XIntOrString = true
	}
	if out.Type == "object" && len(t.Properties) == 0 && t.AdditionalProperties == nil {
		out.XPreserveUnknownFields = true
	}
	if t.Items != nil {
		out.Items = typeStructural(t.Items, onPath)
	}
	if t.AdditionalProperties != nil {
		out.AdditionalProperties = &structuralschema.StructuralOrBool{Bool: true, Structural: typeStructural(t.AdditionalProperties, onPath)}
	}
	if len(t.Properties) > 0 {
		out.Properties = make(map[string]structuralschema.Structural, len(t.Properties))
		for name, p := range t.Properties {
			out.Properties[name] = *typeStructural(p, onPath)
		}
	}
	return out
}

// objectMetaSchema is ObjectMeta as objects hold it.
func objectMetaSchema() structuralschema.Structural {
	str := stringSchema
	integer := structuralschema.Structural{Generic: structuralschema.Generic{Type: "integer"}}
	boolean := structuralschema.Structural{Generic: structuralschema.Generic{Type: "boolean"}}
	stringMap := structuralschema.Structural{Generic: structuralschema.Generic{Type: "object"},
		AdditionalProperties: &structuralschema.StructuralOrBool{Structural: &str}}
	stringList := structuralschema.Structural{Generic: structuralschema.Generic{Type: "array"}, Items: &str}
	ownerRef := structuralschema.Structural{Generic: structuralschema.Generic{Type: "object"}, Properties: map[string]structuralschema.Structural{
		"apiVersion": str, "kind": str, "name": str, "uid": str, "controller": boolean, "blockOwnerDeletion": boolean,
	}}
	return structuralschema.Structural{Generic: structuralschema.Generic{Type: "object"}, Properties: map[string]structuralschema.Structural{
		"name": str, "generateName": str, "namespace": str, "uid": str, "resourceVersion": str,
		"generation": integer, "creationTimestamp": str, "deletionTimestamp": str,
		"deletionGracePeriodSeconds": integer,
		"labels":                     stringMap, "annotations": stringMap,
		"finalizers":      stringList,
		"ownerReferences": {Generic: structuralschema.Generic{Type: "array"}, Items: &ownerRef},
		"managedFields":   {Generic: structuralschema.Generic{Type: "array"}, Items: &dynSchema},
	}}
}

// undefinedField matches the checker's message for a field a type lacks.
var undefinedField = regexp.MustCompile(`^undefined field '([^']+)'$`)

// undefinedFields finds the parent.… paths of a parsed expression that the
// parent's type lacks and describes each: by field name, the messages in
// the order of the expression.
func undefinedFields(parsed *cel.Ast, parent *apiservercel.DeclType, schemaName string) map[string][]string {
	out := map[string][]string{}
	nav := celast.NavigateAST(parsed.NativeRep())
	for _, ident := range celast.MatchDescendants(nav, celast.KindMatcher(celast.IdentKind)) {
		if ident.AsIdent() != varParent {
			continue
		}
		path := accessPath(ident).path
		t := parent
		for i, name := range path {
			next, known, ok := fieldType(t, name)
			if !known {
				break
			}
			if !ok {
				at := strings.Join(append([]string{varParent}, path[:i]...), ".")
				out[name] = append(out[name], describeUndefined(at, name, t, schemaName))
				break
			}
			t = next
		}
	}
	return out
}

// fieldType returns the type of a field of t. known is false when t does
// not say (dyn, a list); ok is false when t is an object without the field.
func fieldType(t *apiservercel.DeclType, name string) (field *apiservercel.DeclType, known, ok bool) {
	switch {
	case t == nil || t.CelType().Kind() == types.DynKind:
		return nil, false, false
	case t.IsMap():
		return t.ElemType, true, true
	case t.IsList() && name == elementSegment:
		return t.ElemType, true, true
	case t.IsObject():
		escaped, _ := apiservercel.Escape(name)
		f, found := t.Fields[escaped]
		if !found {
			return nil, true, false
		}
		return f.Type, true, true
	}
	return nil, false, false
}

// describeUndefined says which field an object lacks, and which it has.
func describeUndefined(at, name string, t *apiservercel.DeclType, schemaName string) string {
	var fields []string
	for escaped := range t.Fields {
		if f, ok := apiservercel.Unescape(escaped); ok {
			fields = append(fields, f)
		}
	}
	slices.Sort(fields)
	msg := fmt.Sprintf("%s has no field %q in %s", at, name, schemaName)
	msg += didYouMean(name, fields)
	if len(fields) == 0 {
		return msg + " (it has no fields)"
	}
	return msg + fmt.Sprintf(" (its fields: %s)", strings.Join(fields, ", "))
}

// didYouMean returns ": did you mean "X"?" for the candidate closest to
// name (case aside, at most two edits away), or "".
func didYouMean(name string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(name), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(": did you mean %q?", best)
}

// editDistance is the Levenshtein distance of two strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
