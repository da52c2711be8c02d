package reconcile

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"kgen.dev/kgen/pkg/schema"
)

// AnnotationTemplateHash holds a hash of the desired object kgen last wrote,
// so a template change is seen even when it only removes a field.
const AnnotationTemplateHash = "kgen.dev/template-hash"

// withHash sets AnnotationTemplateHash on desired to a hash of the rest of it
// but LabelShard, and returns desired.
func withHash(desired *unstructured.Unstructured) *unstructured.Unstructured {
	out := desired
	ann := out.GetAnnotations()
	delete(ann, AnnotationTemplateHash)
	if len(ann) == 0 {
		ann = nil // hash the object as if it never had the annotation
	}
	out.SetAnnotations(ann)
	// The replica a parent is assigned to is not part of the template: a
	// parent that moves relabels its children (pkg/controller's takeover)
	// without making them out of date.
	meta, _ := out.Object["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	shard, sharded := labels[LabelShard]
	delete(labels, LabelShard)
	// encoding/json sorts map keys, so equal objects hash equally.
	b, err := json.Marshal(out.Object)
	if err != nil { // an unstructured object is always JSON; keep it safe anyway
		b = []byte(err.Error())
	}
	if sharded {
		labels[LabelShard] = shard
	}
	sum := sha256.Sum256(b)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[AnnotationTemplateHash] = hex.EncodeToString(sum[:12])
	out.SetAnnotations(ann)
	return out
}

// templateHash returns the hash an object carries.
func templateHash(obj *unstructured.Unstructured) string {
	return obj.GetAnnotations()[AnnotationTemplateHash]
}

// UpToDate reports whether live already holds everything in desired (which
// carries its template hash): the hash matches and every field of desired
// has the same value in live, as Matches compares them. Fields only live
// has (defaults, fields of other managers, status) do not matter. A
// converged child needs no write.
func UpToDate(desired, live *unstructured.Unstructured, kind *schema.Field) bool {
	if live == nil {
		return false
	}
	if templateHash(desired) != templateHash(live) {
		return false
	}
	return Matches(storedForm(desired).Object, live.Object, kind)
}

// storedForm returns desired as the API server stores it where that differs
// in a way Matches cannot know from the schema: a Secret's stringData is
// write-only, and stored base64-encoded in data, where it replaces a key of
// the same name. Other objects are returned as they are.
func storedForm(desired *unstructured.Unstructured) *unstructured.Unstructured {
	if desired.GetAPIVersion() != "v1" || desired.GetKind() != "Secret" {
		return desired
	}
	strs, ok := desired.Object["stringData"].(map[string]any)
	if !ok {
		return desired
	}
	out := &unstructured.Unstructured{Object: maps.Clone(desired.Object)}
	delete(out.Object, "stringData")
	data, _ := desired.Object["data"].(map[string]any)
	data = maps.Clone(data)
	if data == nil {
		data = map[string]any{}
	}
	for k, v := range strs {
		if s, ok := v.(string); ok {
			data[k] = base64.StdEncoding.EncodeToString([]byte(s))
		}
	}
	out.Object["data"] = data
	return out
}

// Matches reports whether every field of want is in got with an equal
// value, where kind (nil when unknown) says how to compare:
//
//   - maps compare key by key; a key want has and got lacks matters unless
//     want's value is empty (the API server drops empty values);
//   - a keyed list (x-kubernetes-list-type: map, or a merge key) matches
//     each wanted element with the element of got that has the same keys,
//     so elements other writers added (a sidecar a webhook injected) and
//     the order do not matter; a set needs each wanted element somewhere in
//     got; any other list needs the same length and matching elements in
//     order;
//   - a resource.Quantity compares by value ("0.5" equals "500m", 1 equals
//     "1"), as the server stores quantities in canonical form;
//   - numbers compare by value (a template's 1 equals JSON's 1.0).
//
// Without a schema, metadata.ownerReferences and metadata.finalizers, which
// other controllers add to, are compared as sets.
func Matches(want, got any, kind *schema.Field) bool {
	return match(want, got, kind, "", nil)
}

// Differences returns the paths of the fields where got does not hold what
// want sets, compared as Matches compares them: none exactly when Matches
// is true. They are sorted and written as Kubernetes writes field paths:
// spec.replicas, metadata.labels[app.kubernetes.io/name], an element of a
// keyed list by its keys (spec.template.spec.containers[name=app].image),
// of another list by its index (spec.args[2]). A list of another length, a
// set that lacks an element, an element of a keyed list that got lacks,
// and a value of another type are named whole.
func Differences(want, got any, kind *schema.Field) []string {
	d := &differ{}
	match(want, got, kind, "", d)
	slices.Sort(d.out)
	return slices.Compact(d.out)
}

// differ records the paths where a match fails. Matches passes a nil
// *differ, which records nothing, and the walk then stops at the first
// difference; every method is safe on nil.
type differ struct {
	path []string // segments: ".name", "[key]", "[2]", "[name=app]"
	out  []string
}

// field enters the field or map key k.
func (d *differ) field(k string) {
	if d == nil {
		return
	}
	if plainField.MatchString(k) {
		d.path = append(d.path, "."+k)
	} else {
		d.path = append(d.path, "["+k+"]")
	}
}

var plainField = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// index enters the element i of a list.
func (d *differ) index(i int) {
	if d != nil {
		d.path = append(d.path, "["+strconv.Itoa(i)+"]")
	}
}

// element enters the element of a keyed list with wv's keys.
func (d *differ) element(wv any, keys []string) {
	if d == nil {
		return
	}
	wm, _ := wv.(map[string]any)
	var parts []string
	for _, k := range keys {
		if v, set := wm[k]; set {
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	d.path = append(d.path, "["+strings.Join(parts, ",")+"]")
}

// leave goes back up one segment.
func (d *differ) leave() {
	if d != nil {
		d.path = d.path[:len(d.path)-1]
	}
}

// differs records the current path, and returns false.
func (d *differ) differs() bool {
	if d != nil {
		d.out = append(d.out, strings.TrimPrefix(strings.Join(d.path, ""), "."))
	}
	return false
}

// match compares as Matches does; with a differ it goes on past a
// difference, recording each.
func match(want, got any, kind *schema.Field, name string, d *differ) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return d.differs()
		}
		same := true
		for k, wv := range w {
			gv, ok := g[k]
			if !ok && isEmpty(wv) {
				continue
			}
			if d == nil {
				if !ok || !match(wv, gv, kind.Property(k), k, nil) {
					return false
				}
				continue
			}
			d.field(k)
			if !ok {
				same = d.differs()
			} else if !match(wv, gv, kind.Property(k), k, d) {
				same = false
			}
			d.leave()
		}
		return same
	case []any:
		g, ok := got.([]any)
		if !ok {
			if len(w) == 0 && got == nil {
				return true
			}
			return d.differs()
		}
		listType, keys := kind.Keys()
		if kind == nil && (name == "ownerReferences" || name == "finalizers") {
			listType = schema.ListSet
		}
		same := true
		switch listType {
		case schema.ListMap:
			elem := kind.Element()
			for _, wv := range w {
				if keyed(wv, g, keys, elem) >= 0 {
					continue
				}
				if d == nil {
					return false
				}
				same = false
				// The fields that differ in the element with wv's keys,
				// or the element as a whole.
				d.element(wv, keys)
				if j := keyedLoose(wv, g, keys); j >= 0 {
					match(wv, g[j], elem, "", d)
				} else {
					d.differs()
				}
				d.leave()
			}
			return same
		case schema.ListSet:
			for _, wv := range w {
				if !slices.ContainsFunc(g, func(gv any) bool { return match(wv, gv, kind.Element(), "", nil) }) {
					same = d.differs()
					if d == nil {
						return false
					}
				}
			}
			return same
		}
		if len(w) != len(g) {
			return d.differs()
		}
		for i := range w {
			if d == nil {
				if !match(w[i], g[i], kind.Element(), "", nil) {
					return false
				}
				continue
			}
			d.index(i)
			if !match(w[i], g[i], kind.Element(), "", d) {
				same = false
			}
			d.leave()
		}
		return same
	default:
		if kind.IsQuantity() {
			if a, ok := quantity(want); ok {
				if b, ok := quantity(got); ok && a.Cmp(b) == 0 {
					return true
				}
				return d.differs()
			}
		}
		if scalarEqual(want, got) {
			return true
		}
		return d.differs()
	}
}

// keyed returns the index of the element of got that wv's keys select and
// that wv matches, or -1. A key field wv leaves out (one the server
// defaults, such as a port's protocol) matches any value.
func keyed(wv any, got []any, keys []string, elem *schema.Field) int {
	wm, ok := wv.(map[string]any)
	if !ok {
		return slices.IndexFunc(got, func(gv any) bool { return match(wv, gv, elem, "", nil) })
	}
	for i, gv := range got {
		gm, ok := gv.(map[string]any)
		if !ok {
			continue
		}
		same := true
		for _, k := range keys {
			if v, set := wm[k]; set && !match(v, gm[k], elem.Property(k), k, nil) {
				same = false
				break
			}
		}
		if same && match(wm, gm, elem, "", nil) {
			return i
		}
	}
	return -1
}

func quantity(v any) (resource.Quantity, bool) {
	var s string
	switch n := v.(type) {
	case string:
		s = n
	case int64:
		s = strconv.FormatInt(n, 10)
	case int:
		s = strconv.Itoa(n)
	case float64:
		s = strconv.FormatFloat(n, 'f', -1, 64)
	case json.Number:
		s = n.String()
	default:
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(s)
	return q, err == nil
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

// Digest is a fingerprint of the part of an object a template sets.
type Digest [16]byte

// Project fingerprints the values got holds at the fields want sets,
// walking want's shape and reading got's values, with lists matched as in
// Matches. Two objects have the same projection when nothing a template
// sets differs between them, whatever else they hold.
//
// kgen remembers the projection of the object the server returned after
// each write. When the live object later has that same projection, the
// fields kgen set still hold what the server made of them: a difference
// between template and live that the server made (a default, a
// normalisation Matches does not know) is then not a reason to write again.
func Project(want, got any, kind *schema.Field) Digest {
	h := sha256.New()
	project(h, want, got, kind)
	var d Digest
	copy(d[:], h.Sum(nil))
	return d
}

func project(h hash.Hash, want, got any, kind *schema.Field) {
	switch w := want.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		h.Write([]byte{'{'})
		for _, k := range keys {
			fmt.Fprintf(h, "%q:", k)
			gv, ok := g[k]
			if !ok {
				h.Write([]byte{0})
				continue
			}
			project(h, w[k], gv, kind.Property(k))
		}
		h.Write([]byte{'}'})
	case []any:
		g, _ := got.([]any)
		h.Write([]byte{'['})
		listType, keys := kind.Keys()
		for i, wv := range w {
			var gv any
			switch {
			case listType == schema.ListMap:
				if j := keyedLoose(wv, g, keys); j >= 0 {
					gv = g[j]
				}
			case i < len(g):
				gv = g[i]
			}
			project(h, wv, gv, kind.Element())
		}
		if listType == "" {
			fmt.Fprintf(h, "#%d", len(g))
		}
		h.Write([]byte{']'})
	default:
		b, _ := json.Marshal(got)
		h.Write(b)
		h.Write([]byte{','})
	}
}

// keyedLoose returns the index of the element of got with wv's keys, or -1.
func keyedLoose(wv any, got []any, keys []string) int {
	wm, ok := wv.(map[string]any)
	if !ok {
		return -1
	}
	for i, gv := range got {
		gm, ok := gv.(map[string]any)
		if !ok {
			continue
		}
		same := true
		for _, k := range keys {
			if v, set := wm[k]; set && !scalarEqual(v, gm[k]) {
				same = false
				break
			}
		}
		if same {
			return i
		}
	}
	return -1
}
