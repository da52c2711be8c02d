package rules

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kschema "kgen.dev/kgen/pkg/schema"
)

// Templates checked against their kind's schema: when the schema of a
// child's kind is known (Options.Schemas, Options.Types), every key of the
// template must be a field of it, unless the object there keeps unknown
// fields or names none, and every value must be able to fit its field:
//
//   - an expression by its static CEL type (dyn fits anything; an optional
//     is checked by its value's type; bytes, durations and timestamps
//     render as strings; an int fits a number field and a double an
//     integer one, since their JSON is a number either way);
//   - interpolated text is a string;
//   - a literal mapping or list must be an object or a list there; other
//     literals are left to the API server.
//
// A field of several types (IntOrString, Quantity) takes a value of any of
// them, and a field whose schema does not say takes anything. The check is
// conservative: what it cannot tell is accepted, and fails when kgen
// applies the child, as without a schema.

// childShape returns what is known of a child kind's schema, with
// apiVersion, kind and metadata as kgen writes them; nil when nothing is.
func (l *loader) childShape(gvk schema.GroupVersionKind) *kschema.Type {
	if gvk.Kind == "" {
		return nil
	}
	var t *kschema.Type
	if l.c.opts.Schemas != nil {
		if p, ok := l.c.opts.Schemas(gvk); ok && p != nil {
			t = kschema.TypeOf(p)
		}
	}
	if t == nil && l.c.opts.Types != nil {
		if p, ok := l.c.opts.Types(gvk); ok {
			t = p
		}
	}
	if t == nil || !t.Is("object") || t.Open() {
		return nil // any object: nothing to check
	}
	root := *t
	root.Properties = maps.Clone(t.Properties)
	root.Properties["apiVersion"] = stringType
	root.Properties["kind"] = stringType
	root.Properties["metadata"] = objectMetaType
	return &root
}

var (
	stringType     = &kschema.Type{Types: []string{"string"}}
	integerType    = &kschema.Type{Types: []string{"integer"}}
	booleanType    = &kschema.Type{Types: []string{"boolean"}}
	objectMetaType = func() *kschema.Type {
		stringMap := &kschema.Type{Types: []string{"object"}, AdditionalProperties: stringType}
		stringList := &kschema.Type{Types: []string{"array"}, Items: stringType}
		ownerRef := &kschema.Type{Types: []string{"object"}, Properties: map[string]*kschema.Type{
			"apiVersion": stringType, "kind": stringType, "name": stringType, "uid": stringType,
			"controller": booleanType, "blockOwnerDeletion": booleanType,
		}}
		return &kschema.Type{Types: []string{"object"}, Properties: map[string]*kschema.Type{
			"name": stringType, "generateName": stringType, "namespace": stringType, "selfLink": stringType,
			"uid": stringType, "resourceVersion": stringType, "generation": integerType,
			"creationTimestamp": stringType, "deletionTimestamp": stringType, "deletionGracePeriodSeconds": integerType,
			"labels": stringMap, "annotations": stringMap, "finalizers": stringList,
			"ownerReferences": {Types: []string{"array"}, Items: ownerRef},
			"managedFields":   {Types: []string{"array"}, Items: &kschema.Type{}},
		}}
	}()
)

// shapeField returns the type of a field of an object; ok is false when
// the object cannot have it.
func shapeField(t *kschema.Type, name string) (field *kschema.Type, ok bool) {
	switch {
	case t == nil:
		return nil, true
	case t.Properties[name] != nil:
		return t.Properties[name], true
	case t.AdditionalProperties != nil:
		return t.AdditionalProperties, true
	}
	return nil, t.Open()
}

// checkKey reports a key of a mapping that its object cannot have, and
// returns the key's type (nil for unknown).
func (l *loader) checkKey(t *kschema.Type, key string, at *yaml.Node, w where) *kschema.Type {
	field, ok := shapeField(t, key)
	if ok {
		return field
	}
	fields := slices.Sorted(maps.Keys(t.Properties))
	msg := fmt.Sprintf("%s has no field %q here", l.shapeName, key)
	msg += didYouMean(key, fields)
	if len(fields) <= 20 {
		msg += fmt.Sprintf(" (its fields: %s)", strings.Join(fields, ", "))
	}
	l.errorf(at, w.key(key), "%s", msg)
	return nil
}

// checkShape reports a literal mapping ("object") or list ("array") where
// the schema wants another type. It returns whether it fits.
func (l *loader) checkShape(t *kschema.Type, jsonType, what string, n *yaml.Node, w where) bool {
	if t == nil || len(t.Types) == 0 || slices.Contains(t.Types, jsonType) {
		return true
	}
	l.errorf(n, w, "%s wants %s here, not %s", l.shapeName, describeTypes(t.Types), what)
	return false
}

// jsonTypeOf returns the JSON type a value of a CEL type renders as (see
// Template.Evaluate); "" when it is not known when the rules load.
func jsonTypeOf(t *cel.Type) string {
	switch t.Kind() {
	case types.StringKind, types.BytesKind, types.DurationKind, types.TimestampKind:
		return "string"
	case types.IntKind, types.UintKind:
		return "integer"
	case types.DoubleKind:
		return "number"
	case types.BoolKind:
		return "boolean"
	case types.MapKind, types.StructKind:
		return "object"
	case types.ListKind:
		return "array"
	}
	return "" // dyn, null, a type parameter, a library type (a quantity renders as a string or a number)
}

// fits tells whether a value of CEL type ct can be a field of type t.
func fits(ct *cel.Type, t *kschema.Type) bool {
	if ct.Kind() == types.OpaqueKind && ct.TypeName() == "optional_type" && len(ct.Parameters()) == 1 {
		ct = ct.Parameters()[0] // an empty optional sets nothing
	}
	got := jsonTypeOf(ct)
	if t == nil || len(t.Types) == 0 || got == "" {
		return true
	}
	if !slices.ContainsFunc(t.Types, func(want string) bool { return jsonFits(got, want) }) {
		return false
	}
	params := ct.Parameters()
	switch {
	case got == "array" && len(params) == 1 && t.Items != nil:
		return fits(params[0], t.Items)
	case ct.Kind() == types.MapKind && len(params) == 2 && t.AdditionalProperties != nil && len(t.Properties) == 0:
		return fits(params[1], t.AdditionalProperties)
	}
	return true
}

// jsonFits tells whether a value of JSON type got can be of type want: a
// number is an integer or a number, as its JSON does not tell them apart.
func jsonFits(got, want string) bool {
	numeric := func(s string) bool { return s == "integer" || s == "number" }
	return got == want || (numeric(got) && numeric(want))
}

// describeTypes names JSON types for a person: "an integer", "an integer
// or a string".
func describeTypes(names []string) string {
	words := map[string]string{"object": "an object", "array": "a list", "string": "a string",
		"integer": "an integer", "number": "a number", "boolean": "a boolean"}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = words[n]
		if out[i] == "" {
			out[i] = "a " + n
		}
	}
	return strings.Join(out, " or ")
}

// checkExpression reports an expression that is a whole template value
// whose type cannot fit its field.
func (l *loader) checkExpression(t *kschema.Type, e *Expression) {
	if fits(e.outputType, t) {
		return
	}
	l.errs = append(l.errs, e.error(fmt.Errorf("%s wants %s here, but the expression's type is %s", l.shapeName, describeTypes(t.Types), cel.FormatCELType(e.outputType))))
}

// checkLiteral reports a literal scalar whose JSON type cannot be its
// field's, where literals are checked (status fields: a child's literals
// are left to the API server, which names the field when kgen applies the
// child; a status write it refuses fails for every parent alike). Null
// fits anything, as it sets nothing.
func (l *loader) checkLiteral(t *kschema.Type, v any, n *yaml.Node, w where) {
	if !l.literals || t == nil || len(t.Types) == 0 {
		return
	}
	var got string
	switch v.(type) {
	case string:
		got = "string"
	case int64:
		got = "integer"
	case float64:
		got = "number"
	case bool:
		got = "boolean"
	default:
		return
	}
	if slices.ContainsFunc(t.Types, func(want string) bool { return jsonFits(got, want) }) {
		return
	}
	shown := n.Value
	if s, ok := v.(string); ok {
		shown = strconv.Quote(s)
	}
	l.errorf(n, w, "%s wants %s here, not %s %s", l.shapeName, describeTypes(t.Types), describeTypes([]string{got}), shown)
}

// checkText reports interpolated text where the field cannot be a string.
func (l *loader) checkText(t *kschema.Type, n *yaml.Node, w where) {
	if t == nil || len(t.Types) == 0 || slices.Contains(t.Types, "string") {
		return
	}
	l.errorf(n, w, "%s wants %s here, but text with ${...} in it is a string", l.shapeName, describeTypes(t.Types))
}
