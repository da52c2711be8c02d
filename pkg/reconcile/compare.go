package reconcile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// AnnotationTemplateHash holds a hash of the desired object kgen last wrote,
// so a template change is seen even when it only removes a field.
const AnnotationTemplateHash = "kgen.dev/template-hash"

// withHash sets AnnotationTemplateHash on desired to a hash of the rest of it,
// and returns desired.
func withHash(desired *unstructured.Unstructured) *unstructured.Unstructured {
	out := desired
	ann := out.GetAnnotations()
	delete(ann, AnnotationTemplateHash)
	if len(ann) == 0 {
		ann = nil // hash the object as if it never had the annotation
	}
	out.SetAnnotations(ann)
	// encoding/json sorts map keys, so equal objects hash equally.
	b, err := json.Marshal(out.Object)
	if err != nil { // an unstructured object is always JSON; keep it safe anyway
		b = []byte(err.Error())
	}
	sum := sha256.Sum256(b)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationTemplateHash] = hex.EncodeToString(sum[:12])
	out.SetAnnotations(ann)
	return out
}

// UpToDate reports whether live already holds everything in desired (which
// carries its template hash): the hash matches and every field of desired
// has the same value in live. Fields only live has (defaults, fields of other
// managers, status) do not matter. A converged child needs no write.
func UpToDate(desired, live *unstructured.Unstructured) bool {
	if live == nil {
		return false
	}
	if desired.GetAnnotations()[AnnotationTemplateHash] != live.GetAnnotations()[AnnotationTemplateHash] {
		return false
	}
	return subset(desired.Object, live.Object, "")
}

// subset reports whether every field of want is in got with the same value.
// Maps compare key by key; lists element by element with the same length,
// except the metadata lists other controllers add to (ownerReferences,
// finalizers), where each wanted element must be somewhere in got.
func subset(want, got any, field string) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				if isEmpty(wv) {
					continue // the API server drops empty values
				}
				return false
			}
			if !subset(wv, gv, k) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok {
			return len(w) == 0 && got == nil
		}
		if field == "ownerReferences" || field == "finalizers" {
			for _, wv := range w {
				found := false
				for _, gv := range g {
					if subset(wv, gv, "") {
						found = true
						break
					}
				}
				if !found {
					return false
				}
			}
			return true
		}
		if len(w) != len(g) {
			return false
		}
		for i := range w {
			if !subset(w[i], g[i], "") {
				return false
			}
		}
		return true
	default:
		return scalarEqual(want, got)
	}
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// scalarEqual compares JSON scalars, treating integers and floats of the
// same value as equal (templates yield int64, decoded JSON may yield float64).
func scalarEqual(a, b any) bool {
	if fa, ok := number(a); ok {
		fb, ok := number(b)
		return ok && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}
