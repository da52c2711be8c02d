package reconcile

import (
	"bytes"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Managed-field paths are written as Differences writes paths, so a
// difference inside a keyed list finds the writer that owns it.
func TestOwnsAny(t *testing.T) {
	set := &fieldpath.Set{}
	fields := `{"f:metadata":{"f:labels":{"f:app.kubernetes.io/name":{}}},"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{}}}}},"f:args":{}}}`
	if err := set.FromJSON(bytes.NewReader([]byte(fields))); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"spec.template.spec.containers[name=app].image", true},
		{"spec.template.spec.containers[name=app]", true},
		{"metadata.labels[app.kubernetes.io/name]", true},
		{"spec.args", true},
		{"spec.template.spec.containers[name=other].image", false},
		{"spec.replicas", false},
		{"spec.arg", false},
	} {
		if got := ownsAny(set, []string{tt.path}); got != tt.want {
			t.Errorf("ownsAny(%s) = %t, want %t", tt.path, got, tt.want)
		}
	}
}

// After an adoption, the fields kgen applies are taken from the Update
// entries of other managers (a restorer that created the object with
// POST), and only those: what only they own stays theirs, and entries of
// appliers, of a subresource, and kgen's own are left alone.
func TestCoOwnedPatch(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: subresource, APIVersion: "v1", FieldsType: "FieldsV1",
			FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	const ours = `{"f:data":{"f:a":{}},"f:metadata":{"f:labels":{"f:kgen.dev/parent-uid":{}}}}`
	update, apply := metav1.ManagedFieldsOperationUpdate, metav1.ManagedFieldsOperationApply
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    []metav1.ManagedFieldsEntry // nil: no patch
	}{{
		name: "restorer owns all",
		entries: []metav1.ManagedFieldsEntry{
			entry("velero-server", update, "", `{"f:data":{".":{},"f:a":{},"f:theirs":{}},"f:metadata":{"f:labels":{".":{},"f:kgen.dev/parent-uid":{}}}}`),
			entry(FieldManager, apply, "", ours),
		},
		want: []metav1.ManagedFieldsEntry{
			entry("velero-server", update, "", `{"f:data":{".":{},"f:theirs":{}},"f:metadata":{"f:labels":{".":{}}}}`),
			entry(FieldManager, apply, "", ours),
		},
	}, {
		name: "an entry with only kgen's fields goes",
		entries: []metav1.ManagedFieldsEntry{
			entry("velero-server", update, "", `{"f:data":{"f:a":{}}}`),
			entry(FieldManager, apply, "", ours),
		},
		want: []metav1.ManagedFieldsEntry{entry(FieldManager, apply, "", ours)},
	}, {
		name: "appliers, subresources and kgen's own entries stay",
		entries: []metav1.ManagedFieldsEntry{
			entry("argocd", apply, "", `{"f:data":{"f:a":{}}}`),
			entry("someone", update, "status", `{"f:data":{"f:a":{}}}`),
			entry(FieldManager+"-status", update, "", `{"f:data":{"f:a":{}}}`),
			entry("other", update, "", `{"f:data":{"f:b":{}}}`),
			entry(FieldManager, apply, "", ours),
		},
	}, {
		name:    "kgen has not applied",
		entries: []metav1.ManagedFieldsEntry{entry("velero-server", update, "", `{"f:data":{"f:a":{}}}`)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			obj.SetName("c")
			obj.SetResourceVersion("7")
			obj.SetManagedFields(tc.entries)
			patch, err := coOwnedPatch(obj)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if patch != nil {
					t.Fatalf("patch %s, want none", patch)
				}
				return
			}
			var ops []struct {
				Op    string          `json:"op"`
				Path  string          `json:"path"`
				Value json.RawMessage `json:"value"`
			}
			if err := json.Unmarshal(patch, &ops); err != nil {
				t.Fatal(err)
			}
			if len(ops) != 2 || ops[0].Op != "test" || ops[0].Path != "/metadata/resourceVersion" || string(ops[0].Value) != `"7"` ||
				ops[1].Op != "replace" || ops[1].Path != "/metadata/managedFields" {
				t.Fatalf("patch %s: want a test of the resourceVersion, then a replace of managedFields", patch)
			}
			var got []metav1.ManagedFieldsEntry
			if err := json.Unmarshal(ops[1].Value, &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("entries %s, want %d", ops[1].Value, len(tc.want))
			}
			for i := range got {
				g, w := got[i], tc.want[i]
				if g.Manager != w.Manager || g.Operation != w.Operation || !sameFields(t, g.FieldsV1.Raw, w.FieldsV1.Raw) {
					t.Errorf("entry %d = %s %s %s, want %s %s %s", i, g.Manager, g.Operation, g.FieldsV1.Raw, w.Manager, w.Operation, w.FieldsV1.Raw)
				}
			}
		})
	}
}

func sameFields(t *testing.T, a, b []byte) bool {
	t.Helper()
	sa, sb := &fieldpath.Set{}, &fieldpath.Set{}
	if err := sa.FromJSON(bytes.NewReader(a)); err != nil {
		t.Fatal(err)
	}
	if err := sb.FromJSON(bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
	return sa.Equals(sb)
}
