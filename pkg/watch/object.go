package watch

import (
	"bytes"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is how an informer of this package caches an object: the metadata
// its key, indexers and handlers need, typed, and the whole object as JSON.
//
// An object decoded into maps (unstructured) takes several times the memory
// of its JSON, and every map is more work for the garbage collector; kgen
// reads a cached object in full only when it reconciles its parent, so it
// keeps JSON and decodes on read (Unstructured).
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	raw []byte
}

var _ runtime.Object = (*Object)(nil)
var _ metav1.Object = (*Object)(nil)

// DeepCopyObject returns a copy of the object; the JSON is shared, since it
// is never modified.
func (o *Object) DeepCopyObject() runtime.Object {
	return &Object{TypeMeta: o.TypeMeta, ObjectMeta: *o.ObjectMeta.DeepCopy(), raw: o.raw}
}

// Unstructured decodes the whole object. The result is the caller's own.
func (o *Object) Unstructured() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(o.raw); err != nil {
		return nil, fmt.Errorf("decode cached %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
	}
	return u, nil
}

// Size returns how many bytes of JSON the object holds.
func (o *Object) Size() int { return len(o.raw) }

// Compact is the default transform: it drops what kgen never reads from an
// object (its managed fields and the client-side apply annotation) and turns
// it into an *Object. Anything that is not unstructured passes unchanged.
func Compact(obj any) (any, error) {
	return compact(obj, nil)
}

// CompactKeeping is Compact, except that the typed metadata of the *Object
// keeps only the labels and annotations whose keys keep accepts; the JSON
// keeps them all. Labels and annotations are a good part of what a cached
// object costs, and indexers and handlers usually need only a few.
func CompactKeeping(keep func(key string) bool) func(any) (any, error) {
	return func(obj any) (any, error) { return compact(obj, keep) }
}

func compact(obj any, keep func(key string) bool) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	ann := u.GetAnnotations()
	if _, ok := ann[lastApplied]; ok {
		delete(ann, lastApplied)
		u.SetAnnotations(ann)
		ann = u.GetAnnotations()
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	// The encoder's buffer grows by doubling: keep only what is used.
	o := &Object{raw: bytes.Clone(raw)}
	o.APIVersion, o.Kind = u.GetAPIVersion(), u.GetKind()
	o.Name, o.Namespace = u.GetName(), u.GetNamespace()
	o.UID, o.ResourceVersion, o.Generation = u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
	o.Labels, o.Annotations = filter(u.GetLabels(), keep), filter(ann, keep)
	o.DeletionTimestamp = u.GetDeletionTimestamp()
	return o, nil
}

func filter(m map[string]string, keep func(string) bool) map[string]string {
	if keep == nil || len(m) == 0 {
		return m
	}
	var out map[string]string
	for k, v := range m {
		if keep(k) {
			if out == nil {
				out = make(map[string]string, 4)
			}
			out[k] = v
		}
	}
	return out
}

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// Decode returns the full object behind a cache entry: an *Object decoded,
// or an unstructured object as it is.
func Decode(obj any) (*unstructured.Unstructured, error) {
	switch o := obj.(type) {
	case *Object:
		return o.Unstructured()
	case *unstructured.Unstructured:
		return o, nil
	}
	return nil, fmt.Errorf("unexpected %T in an informer cache", obj)
}
