package rules

import (
	"maps"
	"slices"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// WithDefaults returns the parent with the defaults of spec.parent.schema
// set where its spec lacks them, as the API server sets them when it reads
// an object of the CRD made from that schema (kgenctl crd, run
// --manage-crds; only there is the schema the served one). A parent decoded before its CRD gained a defaulted field
// lacks it until it is read again: a watch opened before the CRD changed
// delivers such objects until it is reopened, and a new version of a rule
// that reads the field would otherwise fail on them ("no such key"),
// recording a Warning, until kgen's cache lists them again. The parent
// itself is returned when nothing is missing (or the rule has no
// spec.parent.schema); otherwise a copy.
//
// It follows the API server's defaulting of structural schemas: a default
// is set where its field is missing from an object that exists, and the
// defaults of the fields of a default, or of a value present, in turn.
// (k8s.io/apiextensions-apiserver's own defaulting takes its internal
// structural schema, which kgen does not otherwise build.)
func (r *Rule) WithDefaults(parent *unstructured.Unstructured) *unstructured.Unstructured {
	if r.Parent.Schema == nil || parent == nil {
		return parent
	}
	spec, ok := parent.Object["spec"]
	if !ok {
		return parent
	}
	out, changed := withDefaults(spec, r.Parent.Schema)
	if !changed {
		return parent
	}
	cp := &unstructured.Unstructured{Object: maps.Clone(parent.Object)}
	cp.Object["spec"] = out
	return cp
}

// withDefaults sets a schema's defaults in a value, copying what it
// changes; changed tells whether it did.
func withDefaults(v any, s *apiextensionsv1.JSONSchemaProps) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		var out map[string]any
		set := func(k string, val any) {
			if out == nil {
				out = maps.Clone(v)
			}
			out[k] = val
		}
		for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
			p := s.Properties[k]
			val, ok := v[k]
			if !ok || val == nil && !p.Nullable {
				// Missing, or null where null is not allowed: the
				// server sets the default there too.
				if p.Default == nil {
					continue
				}
				var d any
				if err := utiljson.Unmarshal(p.Default.Raw, &d); err != nil {
					continue
				}
				d, _ = withDefaults(d, &p)
				set(k, d)
				continue
			}
			if nv, changed := withDefaults(val, &p); changed {
				set(k, nv)
			}
		}
		if ap := s.AdditionalProperties; ap != nil && ap.Schema != nil {
			for _, k := range slices.Sorted(maps.Keys(v)) {
				if _, declared := s.Properties[k]; declared {
					continue
				}
				if nv, changed := withDefaults(v[k], ap.Schema); changed {
					set(k, nv)
				}
			}
		}
		if out == nil {
			return v, false
		}
		return out, true
	case []any:
		if s.Items == nil || s.Items.Schema == nil {
			return v, false
		}
		var out []any
		for i, item := range v {
			if nv, changed := withDefaults(item, s.Items.Schema); changed {
				if out == nil {
					out = slices.Clone(v)
				}
				out[i] = nv
			}
		}
		if out == nil {
			return v, false
		}
		return out, true
	}
	return v, false
}
