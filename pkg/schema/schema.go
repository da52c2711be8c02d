package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/openapi3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// List types, as x-kubernetes-list-type names them.
const (
	ListAtomic = "atomic"
	ListMap    = "map"
	ListSet    = "set"
)

// quantityRef is the component every resource.Quantity field refers to.
const quantityRef = "io.k8s.apimachinery.pkg.api.resource.Quantity"

// Field is what kgen knows of one field of a kind. Only the parts of a
// schema that matter to kgen are kept: a Field with nothing of interest
// below it is left out of its parent (nil), so a nil *Field, like an absent
// one, means "compare literally, lists atomic".
type Field struct {
	// Properties are the fields of an object, by name.
	Properties map[string]*Field `json:"properties,omitempty"`
	// AdditionalProperties is the value of every key of a map.
	AdditionalProperties *Field `json:"additionalProperties,omitempty"`
	// Items is the element of a list.
	Items *Field `json:"items,omitempty"`
	// ListType is ListMap or ListSet for a keyed list or a set; empty for
	// anything else (an atomic list, or not a list).
	ListType string `json:"listType,omitempty"`
	// ListMapKeys are the fields that identify an element of a ListMap.
	ListMapKeys []string `json:"listMapKeys,omitempty"`
	// Quantity is true for a resource.Quantity, which the server stores in
	// its canonical form.
	Quantity bool `json:"quantity,omitempty"`
}

// Property returns the field of an object or map with the given name, or
// nil. It is safe on a nil Field.
func (f *Field) Property(name string) *Field {
	if f == nil {
		return nil
	}
	if p, ok := f.Properties[name]; ok {
		return p
	}
	return f.AdditionalProperties
}

// Element returns the element of a list, or nil. It is safe on a nil
// Field.
func (f *Field) Element() *Field {
	if f == nil {
		return nil
	}
	return f.Items
}

// Keys returns the list type (ListMap, ListSet, or empty for atomic) and,
// for ListMap, the key fields. It is safe on a nil Field.
func (f *Field) Keys() (listType string, keys []string) {
	if f == nil {
		return "", nil
	}
	return f.ListType, f.ListMapKeys
}

// IsQuantity reports whether the field is a resource.Quantity. It is safe
// on a nil Field.
func (f *Field) IsQuantity() bool { return f != nil && f.Quantity }

// Source answers for kinds from the API server's OpenAPI v3 documents,
// fetching each group version once. It is safe for concurrent use.
type Source struct {
	root openapi3.Root

	mu    sync.Mutex
	kinds map[schema.GroupVersionKind]*Field
	// fetched holds the group versions already read, and the error of
	// reading each, so a missing document is not asked for again until
	// Forget.
	fetched map[schema.GroupVersion]error
}

// New returns a Source reading through client (for example
// discovery.NewDiscoveryClientForConfig(c).OpenAPIV3()).
func New(client openapi.Client) *Source {
	return &Source{root: openapi3.NewRoot(client), kinds: map[schema.GroupVersionKind]*Field{}, fetched: map[schema.GroupVersion]error{}}
}

// Kind returns what is known of a kind's fields: nil (and no error) when
// the server publishes no schema for it or nothing in it matters to kgen.
// The error says why a group version's document could not be read; the
// next call tries again only after Forget.
func (s *Source) Kind(gvk schema.GroupVersionKind) (*Field, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.kinds[gvk]; ok {
		return f, nil
	}
	gv := gvk.GroupVersion()
	if err, done := s.fetched[gv]; done {
		return nil, err
	}
	doc, err := s.root.GVSpec(gv)
	if err != nil {
		err = fmt.Errorf("read the OpenAPI v3 schema of %s: %w", gv, err)
	} else {
		for k, f := range Condense(doc) {
			s.kinds[k] = f
		}
	}
	s.fetched[gv] = err
	return s.kinds[gvk], err
}

// Forget drops what is known of a group version, so it is read again: for
// a CRD that changed.
func (s *Source) Forget(gv schema.GroupVersion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.fetched, gv)
	for k := range s.kinds {
		if k.GroupVersion() == gv {
			delete(s.kinds, k)
		}
	}
}

// Condense returns, for every kind a document defines (by its
// x-kubernetes-group-version-kind extension), the Field tree kgen keeps.
func Condense(doc *spec3.OpenAPI) map[schema.GroupVersionKind]*Field {
	out := map[schema.GroupVersionKind]*Field{}
	if doc == nil || doc.Components == nil {
		return out
	}
	c := &condenser{components: doc.Components.Schemas, memo: map[string]*Field{}, busy: map[string]bool{}}
	names := make([]string, 0, len(doc.Components.Schemas))
	for name := range doc.Components.Schemas {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, gvk := range kindsOf(doc.Components.Schemas[name]) {
			out[gvk] = c.component(name)
		}
	}
	return out
}

// kindsOf reads a component's x-kubernetes-group-version-kind extension.
func kindsOf(s *spec.Schema) []schema.GroupVersionKind {
	if s == nil {
		return nil
	}
	raw, ok := s.Extensions["x-kubernetes-group-version-kind"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var list []schema.GroupVersionKind
	if err := json.Unmarshal(b, &list); err != nil {
		return nil
	}
	return list
}

// condenser walks a document's schemas, condensing each component once.
type condenser struct {
	components map[string]*spec.Schema
	memo       map[string]*Field
	busy       map[string]bool // components being condensed: a recursive type
}

func (c *condenser) component(name string) *Field {
	if f, ok := c.memo[name]; ok {
		return f
	}
	if name == quantityRef {
		return &Field{Quantity: true}
	}
	s, ok := c.components[name]
	if !ok || c.busy[name] {
		// A recursive type (JSONSchemaProps) is compared literally below
		// its first level.
		return nil
	}
	c.busy[name] = true
	f := c.schema(s)
	delete(c.busy, name)
	c.memo[name] = f
	return f
}

// schema condenses one schema; nil when nothing below it matters.
func (c *condenser) schema(s *spec.Schema) *Field {
	if s == nil {
		return nil
	}
	if ref := refName(s); ref != "" {
		return c.component(ref)
	}
	// A property that refers to a type with a description or default of
	// its own is written allOf: [{$ref}].
	var base *Field
	if len(s.AllOf) == 1 {
		base = c.schema(&s.AllOf[0])
	}
	f := &Field{}
	if base != nil {
		*f = *base
	}
	if len(s.Properties) > 0 {
		props := map[string]*Field{}
		for name, p := range s.Properties {
			if pf := c.schema(&p); pf != nil {
				props[name] = pf
			}
		}
		if len(props) > 0 {
			f.Properties = props
		}
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		f.AdditionalProperties = c.schema(s.AdditionalProperties.Schema)
	}
	if s.Items != nil && s.Items.Schema != nil {
		f.Items = c.schema(s.Items.Schema)
	}
	if s.Type.Contains("array") || s.Items != nil {
		f.ListType, f.ListMapKeys = listKeys(s)
	}
	if f.Properties == nil && f.AdditionalProperties == nil && f.Items == nil && f.ListType == "" && !f.Quantity {
		return nil
	}
	return f
}

// listKeys reads a list's type the way server-side apply does: its
// x-kubernetes-list-type, or else a patch strategy of merge with a merge
// key, which makes a keyed list too.
func listKeys(s *spec.Schema) (string, []string) {
	switch t, _ := s.Extensions.GetString("x-kubernetes-list-type"); t {
	case ListMap:
		return ListMap, stringList(s.Extensions["x-kubernetes-list-map-keys"])
	case ListSet:
		return ListSet, nil
	case ListAtomic:
		return "", nil
	}
	strategy, _ := s.Extensions.GetString("x-kubernetes-patch-strategy")
	key, _ := s.Extensions.GetString("x-kubernetes-patch-merge-key")
	if key != "" && slices.Contains(strings.Split(strategy, ","), "merge") {
		return ListMap, []string{key}
	}
	return "", nil
}

func stringList(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func refName(s *spec.Schema) string {
	ref := s.Ref.String()
	if ref == "" {
		return ""
	}
	return strings.TrimPrefix(ref, "#/components/schemas/")
}
