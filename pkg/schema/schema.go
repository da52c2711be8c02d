package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/openapi"
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

// Source answers for kinds from the API server's OpenAPI v3 documents.
// It keeps only what it condensed: a group version's document (core/v1 is
// several megabytes) is read when a kind of it is asked for, and dropped
// once the kinds asked for are condensed; a kind asked for later reads it
// again. Prefetch condenses several kinds of one document at once. It is
// safe for concurrent use.
type Source struct {
	client openapi.Client

	mu    sync.Mutex
	kinds map[schema.GroupVersionKind]*Field
	// types holds the Type of every kind in kinds; nil for a kind the
	// server publishes no schema of.
	types map[schema.GroupVersionKind]*Type
	// failed holds the error of reading each group version that could not
	// be read, so it is not asked for again until Forget.
	failed map[schema.GroupVersion]error
}

// New returns a Source reading through client (for example
// discovery.NewDiscoveryClientForConfig(c).OpenAPIV3()).
func New(client openapi.Client) *Source {
	return &Source{client: client, kinds: map[schema.GroupVersionKind]*Field{}, types: map[schema.GroupVersionKind]*Type{}, failed: map[schema.GroupVersion]error{}}
}

// Kind returns what is known of a kind's fields: nil (and no error) when
// the server publishes no schema for it or nothing in it matters to kgen.
// The error says why a group version's document could not be read; the
// next call tries again only after Forget.
func (s *Source) Kind(gvk schema.GroupVersionKind) (*Field, error) {
	if err := s.Prefetch(gvk); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kinds[gvk], nil
}

// Type returns the shape of a kind's objects, for type-checking rules:
// nil (and no error) when the server publishes no schema for it. Errors
// are as for Kind: the document is read once for both.
func (s *Source) Type(gvk schema.GroupVersionKind) (*Type, error) {
	if err := s.Prefetch(gvk); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.types[gvk], nil
}

// Prefetch condenses the kinds that are not known yet, reading each group
// version's document once: both what comparing objects needs (Kind) and
// their shape (Type), so that checking a rule and running it read the
// document once.
func (s *Source) Prefetch(gvks ...schema.GroupVersionKind) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	byGV := map[schema.GroupVersion][]schema.GroupVersionKind{}
	for _, gvk := range gvks {
		if _, known := s.kinds[gvk]; !known {
			byGV[gvk.GroupVersion()] = append(byGV[gvk.GroupVersion()], gvk)
		}
	}
	var errs []error
	for gv, wanted := range byGV {
		if err, failed := s.failed[gv]; failed {
			errs = append(errs, err)
			continue
		}
		doc, err := s.document(gv)
		if err != nil {
			err = fmt.Errorf("read the OpenAPI v3 schema of %s: %w", gv, err)
			s.failed[gv] = err
			errs = append(errs, err)
			continue
		}
		d, err := parseDocument(doc)
		if err != nil {
			err = fmt.Errorf("read the OpenAPI v3 schema of %s: %w", gv, err)
			s.failed[gv] = err
			errs = append(errs, err)
			continue
		}
		fields, types := d.fields(wanted), d.types(wanted)
		for _, gvk := range wanted {
			s.kinds[gvk] = fields[gvk] // nil when nothing matters
			s.types[gvk] = types[gvk]
		}
	}
	return errors.Join(errs...)
}

// document reads a group version's OpenAPI v3 document as JSON.
func (s *Source) document(gv schema.GroupVersion) ([]byte, error) {
	paths, err := s.client.Paths()
	if err != nil {
		return nil, err
	}
	path := "apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		path = "api/" + gv.Version
	}
	doc, ok := paths[path]
	if !ok {
		return nil, fmt.Errorf("the server publishes no OpenAPI v3 document %s", path)
	}
	return doc.Schema("application/json")
}

// Forget drops what is known of a group version, so it is read again: for
// a CRD that changed.
func (s *Source) Forget(gv schema.GroupVersion) {
	s.forget(func(g schema.GroupVersion) bool { return g == gv })
}

// ForgetGroup drops what is known of every version of a group, or of every
// group when group is "*".
func (s *Source) ForgetGroup(group string) {
	s.forget(func(g schema.GroupVersion) bool { return group == "*" || g.Group == group })
}

func (s *Source) forget(match func(schema.GroupVersion) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for gv := range s.failed {
		if match(gv) {
			delete(s.failed, gv)
		}
	}
	for k := range s.kinds {
		if match(k.GroupVersion()) {
			delete(s.kinds, k)
			delete(s.types, k)
		}
	}
}

// Condense returns the Field tree of each wanted kind of an OpenAPI v3
// document given as JSON (every kind the document defines when none is
// named). Only the components the wanted kinds reach are decoded: the
// document's other schemas stay bytes.
func Condense(data []byte, wanted ...schema.GroupVersionKind) (map[schema.GroupVersionKind]*Field, error) {
	d, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	return d.fields(wanted), nil
}

// CondenseTypes returns the Type of each wanted kind of an OpenAPI v3
// document given as JSON (every kind the document defines when none is
// named), decoding only the components the wanted kinds reach.
func CondenseTypes(data []byte, wanted ...schema.GroupVersionKind) (map[schema.GroupVersionKind]*Type, error) {
	d, err := parseDocument(data)
	if err != nil {
		return nil, err
	}
	return d.types(wanted), nil
}

// document is an OpenAPI v3 document whose components are decoded when
// first reached.
type document struct {
	raw     map[string]json.RawMessage
	decoded map[string]*spec.Schema
}

func parseDocument(data []byte) (*document, error) {
	var doc struct {
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	return &document{raw: doc.Components.Schemas, decoded: map[string]*spec.Schema{}}, nil
}

// lookup decodes a component.
func (d *document) lookup(name string) (*spec.Schema, bool) {
	if s, ok := d.decoded[name]; ok {
		return s, true
	}
	r, ok := d.raw[name]
	if !ok {
		return nil, false
	}
	s := &spec.Schema{}
	if err := json.Unmarshal(r, s); err != nil {
		return nil, false
	}
	d.decoded[name] = s
	return s, true
}

// components returns the component of each wanted kind (every kind when
// none is named), by the x-kubernetes-group-version-kind of the components.
func (d *document) components(wanted []schema.GroupVersionKind) map[schema.GroupVersionKind]string {
	out := map[schema.GroupVersionKind]string{}
	names := make([]string, 0, len(d.raw))
	for name := range d.raw {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !bytes.Contains(d.raw[name], []byte("x-kubernetes-group-version-kind")) {
			continue
		}
		var ext struct {
			GVKs []schema.GroupVersionKind `json:"x-kubernetes-group-version-kind"`
		}
		if err := json.Unmarshal(d.raw[name], &ext); err != nil {
			continue
		}
		for _, gvk := range ext.GVKs {
			if len(wanted) == 0 || slices.Contains(wanted, gvk) {
				out[gvk] = name
			}
		}
	}
	return out
}

// fields condenses the Fields of the wanted kinds.
func (d *document) fields(wanted []schema.GroupVersionKind) map[schema.GroupVersionKind]*Field {
	c := &condenser{memo: map[string]*Field{}, busy: map[string]bool{}, lookup: d.lookup}
	out := map[schema.GroupVersionKind]*Field{}
	for gvk, name := range d.components(wanted) {
		out[gvk] = c.component(name)
	}
	return out
}

// types condenses the Types of the wanted kinds.
func (d *document) types(wanted []schema.GroupVersionKind) map[schema.GroupVersionKind]*Type {
	c := &typer{memo: map[string]*Type{}, lookup: d.lookup}
	out := map[schema.GroupVersionKind]*Type{}
	for gvk, name := range d.components(wanted) {
		out[gvk] = c.component(name)
	}
	return out
}

// condenser walks a document's schemas, condensing each component once.
type condenser struct {
	lookup func(name string) (*spec.Schema, bool)
	memo   map[string]*Field
	busy   map[string]bool // components being condensed: a recursive type
}

func (c *condenser) component(name string) *Field {
	if f, ok := c.memo[name]; ok {
		return f
	}
	if name == quantityRef {
		return &Field{Quantity: true}
	}
	s, ok := c.lookup(name)
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
