package schema

import (
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Type is the shape of a field as a kind's schema declares it: what the
// rules package needs to tell whether a template's value can fit the field
// and whether a template's key is a field at all. Unlike Field it keeps
// every field, so it is condensed only for the kinds that rules use.
//
// Within one document the Type of a component is shared by every field that
// refers to it, and a recursive type refers to itself: walk a Type along
// something finite (a template), or stop at a Type already on the path.
type Type struct {
	// Types are the JSON types a value may have: "object", "array",
	// "string", "integer", "number" or "boolean". Several for a union
	// (an IntOrString is integer or string, a Quantity string or number);
	// none when the schema does not say: any value.
	Types []string `json:"types,omitempty"`
	// Properties are the fields of an object, by name.
	Properties map[string]*Type `json:"properties,omitempty"`
	// AdditionalProperties is the value of every key of a map; nil when
	// the object has no keys but its Properties.
	AdditionalProperties *Type `json:"additionalProperties,omitempty"`
	// Items is the element of a list; nil when the schema does not say.
	Items *Type `json:"items,omitempty"`
	// PreserveUnknownFields is x-kubernetes-preserve-unknown-fields: the
	// object keeps keys that are not among its Properties.
	PreserveUnknownFields bool `json:"preserveUnknownFields,omitempty"`
	// EmbeddedResource is x-kubernetes-embedded-resource: an object with
	// apiVersion, kind and metadata of its own.
	EmbeddedResource bool `json:"embeddedResource,omitempty"`
}

// Is tells whether t has exactly the one JSON type name.
func (t *Type) Is(name string) bool {
	return t != nil && len(t.Types) == 1 && t.Types[0] == name
}

// Open tells whether an object of this type may hold keys other than its
// Properties: a map, an object that preserves unknown fields or embeds a
// resource, and an object whose schema names no field at all (a
// RawExtension, or a CRD field declared only as type: object), about which
// nothing is known. A nil Type is open.
func (t *Type) Open() bool {
	return t == nil || t.AdditionalProperties != nil || t.PreserveUnknownFields || t.EmbeddedResource || len(t.Properties) == 0
}

// typer condenses the Types of one document's components, each once.
type typer struct {
	lookup func(name string) (*spec.Schema, bool)
	memo   map[string]*Type
}

func (c *typer) component(name string) *Type {
	if t, ok := c.memo[name]; ok {
		return t // also the Type being filled in, for a recursive type
	}
	t := &Type{}
	c.memo[name] = t
	if s, ok := c.lookup(name); ok {
		*t = *c.schema(s)
	}
	return t
}

// schema condenses one schema.
func (c *typer) schema(s *spec.Schema) *Type {
	if ref := refName(s); ref != "" {
		return c.component(ref)
	}
	t := &Type{}
	// A property that refers to a type with a description or default of
	// its own is written allOf: [{$ref}].
	if len(s.AllOf) == 1 {
		*t = *c.schema(&s.AllOf[0])
	}
	if len(s.Type) > 0 {
		t.Types = slices.Clone([]string(s.Type))
	}
	if len(t.Types) == 0 {
		t.Types = unionTypes(append(slices.Clone(s.OneOf), s.AnyOf...))
	}
	if v, _ := s.Extensions.GetBool("x-kubernetes-int-or-string"); v {
		t.Types = []string{"integer", "string"}
	}
	if v, _ := s.Extensions.GetBool("x-kubernetes-preserve-unknown-fields"); v {
		t.PreserveUnknownFields = true
	}
	if v, _ := s.Extensions.GetBool("x-kubernetes-embedded-resource"); v {
		t.EmbeddedResource = true
	}
	if len(s.Properties) > 0 {
		t.Properties = make(map[string]*Type, len(s.Properties))
		for name, p := range s.Properties {
			t.Properties[name] = c.schema(&p)
		}
	}
	if ap := s.AdditionalProperties; ap != nil && (ap.Allows || ap.Schema != nil) {
		t.AdditionalProperties = &Type{}
		if ap.Schema != nil {
			t.AdditionalProperties = c.schema(ap.Schema)
		}
	}
	if s.Items != nil && s.Items.Schema != nil {
		t.Items = c.schema(s.Items.Schema)
	}
	return t
}

// unionTypes returns the types of a oneOf or anyOf whose branches each
// name their types; none (any value) when one does not.
func unionTypes(branches []spec.Schema) []string {
	var out []string
	for _, b := range branches {
		if len(b.Type) == 0 {
			return nil
		}
		for _, name := range b.Type {
			if !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// TypeOf returns the Type of a schema as a CustomResourceDefinition
// version declares it (openAPIV3Schema); nil for nil.
func TypeOf(props *apiextensionsv1.JSONSchemaProps) *Type {
	if props == nil {
		return nil
	}
	t := &Type{}
	if props.Type != "" {
		t.Types = []string{props.Type}
	}
	if props.XIntOrString {
		t.Types = []string{"integer", "string"}
	}
	t.PreserveUnknownFields = props.XPreserveUnknownFields != nil && *props.XPreserveUnknownFields
	t.EmbeddedResource = props.XEmbeddedResource
	if len(props.Properties) > 0 {
		t.Properties = make(map[string]*Type, len(props.Properties))
		for name, p := range props.Properties {
			t.Properties[name] = TypeOf(&p)
		}
	}
	if ap := props.AdditionalProperties; ap != nil && (ap.Allows || ap.Schema != nil) {
		t.AdditionalProperties = &Type{}
		if ap.Schema != nil {
			t.AdditionalProperties = TypeOf(ap.Schema)
		}
	}
	if props.Items != nil && props.Items.Schema != nil {
		t.Items = TypeOf(props.Items.Schema)
	}
	return t
}
