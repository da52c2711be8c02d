package watch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// decodeObject turns the JSON of one object, as the API server sends it in
// a watch event or a list, into an *Object without decoding the object into
// maps: it cuts metadata.managedFields and the last-applied annotation out
// of the bytes and decodes only the metadata. Labels and annotations are all
// kept; the informer's transform filters them. gvk, when not empty, is set
// on an object that does not name its own kind (items of a list).
func decodeObject(data []byte, gvk schema.GroupVersionKind) (*Object, error) {
	raw, err := stripMetadata(data)
	if err != nil {
		return nil, err
	}
	top, _, err := members(raw, 0)
	if err != nil {
		return nil, err
	}
	var typ metav1.TypeMeta
	var meta metav1.ObjectMeta
	for _, m := range top {
		var err error
		switch string(m.name) {
		case "apiVersion":
			err = json.Unmarshal(raw[m.valueStart:m.valueEnd], &typ.APIVersion)
		case "kind":
			err = json.Unmarshal(raw[m.valueStart:m.valueEnd], &typ.Kind)
		case "metadata":
			err = json.Unmarshal(raw[m.valueStart:m.valueEnd], &meta)
		}
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", m.name, err)
		}
	}
	if typ.Kind == "" && !gvk.Empty() {
		typ.APIVersion, typ.Kind = gvk.ToAPIVersionAndKind()
		raw = withTypeMeta(raw, typ)
	}
	o := &Object{TypeMeta: typ, ObjectMeta: meta}
	o.setJSON(raw)
	o.labels, o.annotations = toPairs(meta.Labels, nil), toPairs(meta.Annotations, nil)
	o.ObjectMeta.Labels, o.ObjectMeta.Annotations = nil, nil
	return o, nil
}

// withTypeMeta returns the object raw with apiVersion and kind added first.
func withTypeMeta(raw []byte, typ metav1.TypeMeta) []byte {
	head, _ := json.Marshal(typ) // two strings: cannot fail
	body := bytes.TrimSpace(raw[1:])
	out := make([]byte, 0, len(head)+len(raw)+1)
	out = append(out, head[:len(head)-1]...) // without its closing brace
	if len(body) > 0 && body[0] != '}' {
		out = append(out, ',')
	}
	return append(out, body...)
}

// stripMetadata returns the JSON object data without metadata.managedFields
// and without the last-applied annotation. It returns data itself when
// there is nothing to cut.
func stripMetadata(data []byte) ([]byte, error) {
	top, _, err := members(data, 0)
	if err != nil {
		return nil, err
	}
	var cuts [][2]int
	var replace *replacement
	for _, m := range top {
		if string(m.name) != "metadata" || data[m.valueStart] != '{' {
			continue
		}
		meta, _, err := members(data, m.valueStart)
		if err != nil {
			return nil, err
		}
		for k, mm := range meta {
			switch string(mm.name) {
			case "managedFields":
				if kept := keptManagedFields(data[mm.valueStart:mm.valueEnd]); kept != nil {
					replace = &replacement{at: [2]int{mm.valueStart, mm.valueEnd}, with: kept}
					continue
				}
				cuts = append(cuts, cutRange(meta, k))
			case "annotations":
				if data[mm.valueStart] != '{' {
					continue
				}
				ann, _, err := members(data, mm.valueStart)
				if err != nil {
					return nil, err
				}
				for a, am := range ann {
					if string(am.name) == lastApplied {
						cuts = append(cuts, cutRange(ann, a))
					}
				}
			}
		}
	}
	if len(cuts) == 0 && replace == nil {
		return data, nil
	}
	edits := make([]replacement, 0, len(cuts)+1)
	for _, c := range cuts {
		edits = append(edits, replacement{at: c})
	}
	if replace != nil {
		edits = append(edits, *replace)
	}
	slices.SortFunc(edits, func(a, b replacement) int { return a.at[0] - b.at[0] })
	size := len(data)
	for _, e := range edits {
		size += len(e.with) - (e.at[1] - e.at[0])
	}
	out := make([]byte, 0, size)
	at := 0
	for _, e := range edits {
		out = append(out, data[at:e.at[0]]...)
		out = append(out, e.with...)
		at = e.at[1]
	}
	return append(out, data[at:]...), nil
}

// replacement replaces the bytes in a range of a document.
type replacement struct {
	at   [2]int
	with []byte
}

// LegacyManager is the field manager whose entries the caches keep in an
// object's managedFields, when keptEntry says so: older kgen versions
// created children with POST under this manager (an Update entry of the
// object), and the reconciler moves those fields into its apply entry
// before it first applies such a child; and kgen's entry of a parent's
// status (an Update entry for a JSON patch, an Apply entry for a
// server-side apply) tells which status fields kgen set, so that one the
// rule no longer sets is removed. Every other entry is dropped; kgen reads
// no other.
const LegacyManager = "kgen"

// keptEntry tells whether the caches keep an entry of LegacyManager: an
// Update of the object itself, or an Update or Apply of its status.
func keptEntry(update, apply, object, status bool) bool {
	return update && (object || status) || apply && status
}

// statusEntry marks the managedFields entry of a write of the status
// subresource.
var statusEntry = []byte(`"subresource":"status"`)

// The members of a managedFields entry that the caches keep. The API
// server writes them in the order of ManagedFieldsEntry's fields for a
// built-in kind, and sorted by name for a custom resource (an
// unstructured object), so they are looked for one by one.
var (
	legacyManager = []byte(`"manager":"` + LegacyManager + `"`)
	updateEntry   = []byte(`"operation":"Update"`)
	applyEntry    = []byte(`"operation":"Apply"`)
	subresource   = []byte(`"subresource":`)
)

// keptManagedFields returns the JSON list of the entries of a managedFields
// list that the caches keep (see LegacyManager), or nil if there are none.
func keptManagedFields(list []byte) []byte {
	if !bytes.Contains(list, legacyManager) {
		return nil // the common case: nothing to keep, no parsing
	}
	var kept [][]byte
	i := skipSpace(list, 0)
	if i >= len(list) || list[i] != '[' {
		return nil
	}
	for i = skipSpace(list, i+1); i < len(list) && list[i] != ']'; {
		end, err := valueEnd(list, i)
		if err != nil {
			return nil
		}
		// fieldsV1 holds only names that start with "f:", "k:", "v:",
		// "i:" or ".", so these members cannot be matched inside it.
		if e := list[i:end]; bytes.Contains(e, legacyManager) && keptEntry(bytes.Contains(e, updateEntry), bytes.Contains(e, applyEntry),
			!bytes.Contains(e, subresource), bytes.Contains(e, statusEntry)) {
			kept = append(kept, e)
		}
		i = skipSpace(list, end)
		if i < len(list) && list[i] == ',' {
			i = skipSpace(list, i+1)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return append(append([]byte{'['}, bytes.Join(kept, []byte{','})...), ']')
}

// member is one name/value pair of a JSON object, as offsets into the
// document.
type member struct {
	start      int    // the name's opening quote
	name       []byte // the name as written, without its quotes
	valueStart int
	valueEnd   int // just past the value
}

var errSyntax = errors.New("invalid JSON object")

// members returns the members of the JSON object that starts at d[i] (after
// white space) and the offset just past it. A name is matched as written:
// the API server never escapes the plain names looked for here.
func members(d []byte, i int) ([]member, int, error) {
	i = skipSpace(d, i)
	if i >= len(d) || d[i] != '{' {
		return nil, 0, errSyntax
	}
	i++
	var out []member
	for {
		i = skipSpace(d, i)
		if i < len(d) && d[i] == '}' && len(out) == 0 {
			return out, i + 1, nil
		}
		if i >= len(d) || d[i] != '"' {
			return nil, 0, errSyntax
		}
		nameEnd, err := stringEnd(d, i)
		if err != nil {
			return nil, 0, err
		}
		j := skipSpace(d, nameEnd)
		if j >= len(d) || d[j] != ':' {
			return nil, 0, errSyntax
		}
		vs := skipSpace(d, j+1)
		ve, err := valueEnd(d, vs)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, member{start: i, name: d[i+1 : nameEnd-1], valueStart: vs, valueEnd: ve})
		k := skipSpace(d, ve)
		switch {
		case k < len(d) && d[k] == ',':
			i = k + 1
		case k < len(d) && d[k] == '}':
			return out, k + 1, nil
		default:
			return nil, 0, errSyntax
		}
	}
}

// cutRange is the byte range that removes member k of ms and leaves a valid
// object: with the comma after it, or before it if it is the last.
func cutRange(ms []member, k int) [2]int {
	switch {
	case k+1 < len(ms):
		return [2]int{ms[k].start, ms[k+1].start}
	case k > 0:
		return [2]int{ms[k-1].valueEnd, ms[k].valueEnd}
	default:
		return [2]int{ms[k].start, ms[k].valueEnd}
	}
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the offset just past the string that starts at d[i].
func stringEnd(d []byte, i int) (int, error) {
	for j := i + 1; j < len(d); j++ {
		switch d[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errSyntax
}

// valueEnd returns the offset just past the JSON value that starts at d[i].
// It finds the end only; json.Unmarshal checks what it decodes.
func valueEnd(d []byte, i int) (int, error) {
	if i >= len(d) {
		return 0, errSyntax
	}
	switch d[i] {
	case '"':
		return stringEnd(d, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(d); j++ {
			switch d[j] {
			case '"':
				end, err := stringEnd(d, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errSyntax
	default: // a number, true, false or null
		j := i
		for j < len(d) && !endsScalar(d[j]) {
			j++
		}
		if j == i {
			return 0, errSyntax
		}
		return j, nil
	}
}

func endsScalar(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\r', '\n':
		return true
	}
	return false
}
