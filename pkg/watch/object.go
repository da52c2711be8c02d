package watch

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/flate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is how an informer of this package caches an object: the metadata
// its key, indexers and handlers need, typed, and the whole object as
// deflated JSON.
//
// An object decoded into maps (unstructured) takes several times the memory
// of its JSON, and every map is more work for the garbage collector; kgen
// reads a cached object in full only when it reconciles its parent, so it
// keeps JSON and decodes on read (Unstructured).
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	// labels and annotations hold the kept labels and annotations as
	// key, value, key, value...: for the few kept, a slice takes a third
	// of a map's memory. ObjectMeta.Labels and Annotations stay nil; use
	// GetLabels and GetAnnotations.
	labels, annotations []string
	// raw is the object's JSON, deflated at BestSpeed: the Deployment of
	// BenchmarkDecodeObject takes 1057 bytes instead of 2575, for
	// microseconds per object. klauspost/compress's flate decoded it 10%
	// and read it back 20% faster than compress/flate, into 1% fewer bytes
	// (BenchmarkDecodeObject, BenchmarkObjectUnstructured). size is the
	// length inflated, or 0 when raw is plain JSON (the answer of a write,
	// remembered only until the cache shows it: see compactWritten).
	raw  []byte
	size int
}

var _ runtime.Object = (*Object)(nil)
var _ metav1.Object = (*Object)(nil)

// DeepCopyObject returns a copy of the object; the JSON is shared, since it
// is never modified.
func (o *Object) DeepCopyObject() runtime.Object {
	return &Object{TypeMeta: o.TypeMeta, ObjectMeta: *o.ObjectMeta.DeepCopy(),
		labels: o.labels, annotations: o.annotations, raw: o.raw, size: o.size}
}

// GetLabels returns the kept labels in a new map; nil if there are none.
func (o *Object) GetLabels() map[string]string { return toMap(o.labels) }

// SetLabels replaces the kept labels.
func (o *Object) SetLabels(labels map[string]string) { o.labels = toPairs(labels, nil) }

// GetAnnotations returns the kept annotations in a new map; nil if there
// are none.
func (o *Object) GetAnnotations() map[string]string { return toMap(o.annotations) }

// SetAnnotations replaces the kept annotations.
func (o *Object) SetAnnotations(annotations map[string]string) {
	o.annotations = toPairs(annotations, nil)
}

// Label returns the value of one kept label, without building a map.
func (o *Object) Label(key string) string { return lookup(o.labels, key) }

// Annotation returns the value of one kept annotation, without building a
// map.
func (o *Object) Annotation(key string) string { return lookup(o.annotations, key) }

func toMap(pairs []string) map[string]string {
	if len(pairs) == 0 {
		return nil
	}
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

// toPairs returns the entries of m that keep accepts (all if keep is nil)
// as a sorted key, value list.
func toPairs(m map[string]string, keep func(string) bool) []string {
	n := 0
	for k := range m {
		if keep == nil || keep(k) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	keys := make([]string, 0, n)
	for k := range m {
		if keep == nil || keep(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	pairs := make([]string, 0, 2*n)
	for _, k := range keys {
		pairs = append(pairs, k, m[k])
	}
	return pairs
}

// filterPairs returns the pairs whose keys keep accepts, in a new slice of
// their size.
func filterPairs(pairs []string, keep func(string) bool) []string {
	n := 0
	for i := 0; i < len(pairs); i += 2 {
		if keep(pairs[i]) {
			n += 2
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < len(pairs); i += 2 {
		if keep(pairs[i]) {
			out = append(out, pairs[i], pairs[i+1])
		}
	}
	return out
}

func lookup(pairs []string, key string) string {
	for i := 0; i < len(pairs); i += 2 {
		if pairs[i] == key {
			return pairs[i+1]
		}
	}
	return ""
}

// Unstructured decodes the whole object. The result is the caller's own.
func (o *Object) Unstructured() (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	data, err := o.raw, error(nil)
	if o.size != 0 {
		data, err = inflate(o.raw, o.size)
	}
	if err == nil {
		err = u.UnmarshalJSON(data)
	}
	if err != nil {
		return nil, fmt.Errorf("decode cached %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
	}
	return u, nil
}

// Size returns how many bytes the cached object's JSON takes, deflated.
func (o *Object) Size() int { return len(o.raw) }

// JSON returns the whole object as JSON, in a new slice.
func (o *Object) JSON() ([]byte, error) {
	if o.size == 0 {
		return bytes.Clone(o.raw), nil
	}
	return inflate(o.raw, o.size)
}

func (o *Object) setJSON(data []byte) { o.raw, o.size = deflate(data), len(data) }

var (
	deflaters = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(nil, flate.BestSpeed) // a valid level: no error
		return w
	}}
	inflaters sync.Pool // of flate readers, which are flate.Resetters
	buffers   = sync.Pool{New: func() any { return new(bytes.Buffer) }}
)

// deflate returns data compressed, in a slice of its own.
func deflate(data []byte) []byte {
	buf := buffers.Get().(*bytes.Buffer)
	buf.Reset()
	w := deflaters.Get().(*flate.Writer)
	w.Reset(buf)
	_, _ = w.Write(data) // writing to a bytes.Buffer cannot fail
	_ = w.Close()
	deflaters.Put(w)
	out := bytes.Clone(buf.Bytes())
	buffers.Put(buf)
	return out
}

// inflate returns the n bytes that deflate compressed into z.
func inflate(z []byte, n int) ([]byte, error) {
	src := bytes.NewReader(z)
	r, _ := inflaters.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReader(src)
	} else if err := r.(flate.Resetter).Reset(src, nil); err != nil {
		return nil, err
	}
	defer inflaters.Put(r)
	out := make([]byte, n)
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, fmt.Errorf("inflate cached object: %w", err)
	}
	return out, nil
}

// Compact is the default transform: it drops what kgen never reads from an
// object (its managed fields and the client-side apply annotation) and turns
// it into an *Object. An *Object passes unchanged, and so does anything that
// is not unstructured.
func Compact(obj any) (any, error) {
	return compact(obj, nil, true)
}

// compactWritten is Compact for the answer of a write, which Writes keeps
// only until the cache shows the object: its JSON stays plain, since
// deflating it cost a fifth of compacting a Deployment
// (BenchmarkCompactWritten). It is usually dropped within milliseconds;
// under load, when thousands of writes wait for the cache, plain JSON
// costs about twice the bytes (BenchmarkDecodeObject: 2575 against 1057).
func compactWritten(obj *unstructured.Unstructured) (*Object, error) {
	o, err := compact(obj, nil, false)
	if err != nil {
		return nil, err
	}
	return o.(*Object), nil
}

// CompactKeeping is Compact, except that the typed metadata of the *Object
// keeps only the labels and annotations whose keys keep accepts; the JSON
// keeps them all. Labels and annotations are a good part of what a cached
// object costs, and indexers and handlers usually need only a few.
func CompactKeeping(keep func(key string) bool) func(any) (any, error) {
	return func(obj any) (any, error) { return compact(obj, keep, true) }
}

func compact(obj any, keep func(key string) bool, deflated bool) (any, error) {
	if o, ok := obj.(*Object); ok {
		// Decoded from JSON already (see listWatch): only filter.
		if keep != nil {
			o.labels, o.annotations = filterPairs(o.labels, keep), filterPairs(o.annotations, keep)
		}
		return o, nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	keepLegacyManagedFields(u)
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
	o := &Object{}
	if deflated {
		o.setJSON(raw)
	} else {
		o.raw = raw
	}
	o.APIVersion, o.Kind = u.GetAPIVersion(), u.GetKind()
	o.Name, o.Namespace = u.GetName(), u.GetNamespace()
	o.UID, o.ResourceVersion, o.Generation = u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
	o.labels, o.annotations = toPairs(u.GetLabels(), keep), toPairs(ann, keep)
	o.DeletionTimestamp = u.GetDeletionTimestamp()
	o.Finalizers, o.OwnerReferences = u.GetFinalizers(), u.GetOwnerReferences()
	o.CreationTimestamp = u.GetCreationTimestamp()
	return o, nil
}

// keepLegacyManagedFields drops every managed fields entry of u but the
// ones the reconciler reads (see LegacyManager). It works on the map:
// u.GetManagedFields converts each entry to a typed one through JSON, which
// cost a third of compacting a write's answer in a profile of 2000 parents.
func keepLegacyManagedFields(u *unstructured.Unstructured) {
	md, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		return
	}
	list, ok := md["managedFields"].([]any)
	if !ok {
		delete(md, "managedFields")
		return
	}
	var kept []any
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m["manager"] == LegacyManager &&
			keptEntry(m["operation"] == string(metav1.ManagedFieldsOperationUpdate), m["operation"] == string(metav1.ManagedFieldsOperationApply),
				m["subresource"] == nil || m["subresource"] == "", m["subresource"] == "status") {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		delete(md, "managedFields")
		return
	}
	md["managedFields"] = kept
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
