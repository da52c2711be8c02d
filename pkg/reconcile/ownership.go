package reconcile

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/csaupgrade"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// Who an existing object that stands where a child should be belongs to.
const (
	ownerThis = "this parent's"
	ownerGone = "a parent that no longer exists"
	// ownerOrphaned: this parent let go of it (deletionPolicy Orphan) and
	// renders it again; it takes it back.
	ownerOrphaned = "this parent's, orphaned earlier"
)

// owner tells whose an object found under a child's name is: this parent's
// (ownerThis: the cache was behind), a kgen parent's that no longer exists
// (ownerGone: a parent restored from a backup with a new UID, or a rule
// renamed or changed so another parent renders the same name; it may be
// adopted), or else a sentence saying why kgen must leave it alone.
//
// An object is adopted only when it carries kgen's labels and its owner is
// known to be gone: any doubt (the owner cannot be read) leaves it alone.
func (r *Reconciler) owner(ctx context.Context, obj, parent *unstructured.Unstructured) string {
	if ownedBy(obj, parent) {
		return ownerThis
	}
	labels := obj.GetLabels()
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil && labels[LabelManagedBy] != ManagedBy {
		if from, ok := parseOrphanedFrom(obj); ok {
			// A child kgen let go of (deletionPolicy Orphan), with no
			// owner since.
			if from.UID == parent.GetUID() {
				return ownerOrphaned
			}
			gvk := schema.FromAPIVersionAndKind(from.APIVersion, from.Kind)
			return r.ownerState(ctx, gvk, from.Namespace, from.Name, from.UID, "was orphaned by")
		}
	}
	if labels[LabelManagedBy] != ManagedBy && ref == nil {
		return "is not managed by kgen"
	}
	// The owner: the controller reference names it; without one (a child
	// in another namespace) the parent annotation does, and its kind is the
	// parent kind of the rule that wants the object now.
	var gvk schema.GroupVersionKind
	var namespace, name string
	var uid types.UID
	switch {
	case ref != nil:
		gvk = schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
		namespace, name, uid = obj.GetNamespace(), ref.Name, ref.UID
	case labels[LabelParentUID] != "" && obj.GetAnnotations()[AnnotationParent] != "":
		gvk = parent.GroupVersionKind()
		namespace, name = splitParentRef(obj.GetAnnotations()[AnnotationParent])
		uid = types.UID(labels[LabelParentUID])
	default:
		return "is not managed by kgen"
	}
	if uid == parent.GetUID() {
		return ownerThis // its ownerReference was taken away: kgen applies it back
	}
	if labels[LabelManagedBy] != ManagedBy {
		// Someone else's object whose owner may be gone (it waits for the
		// garbage collector, or was orphaned on purpose): kgen adopts only
		// what kgen made.
		return "is not managed by kgen"
	}
	return r.ownerState(ctx, gvk, namespace, name, uid, "belongs to")
}

// orphanRef is the value of AnnotationOrphanedFrom.
type orphanRef struct {
	APIVersion string    `json:"apiVersion"`
	Kind       string    `json:"kind"`
	Namespace  string    `json:"namespace,omitempty"`
	Name       string    `json:"name"`
	UID        types.UID `json:"uid"`
}

// orphanedFrom returns the value of AnnotationOrphanedFrom for a child
// that parent lets go of.
func orphanedFrom(parent *unstructured.Unstructured) string {
	b, _ := json.Marshal(orphanRef{APIVersion: parent.GetAPIVersion(), Kind: parent.GetKind(),
		Namespace: parent.GetNamespace(), Name: parent.GetName(), UID: parent.GetUID()})
	return string(b)
}

// parseOrphanedFrom reads an object's AnnotationOrphanedFrom; ok is false
// when it has none, or one that does not name a parent in full.
func parseOrphanedFrom(obj *unstructured.Unstructured) (orphanRef, bool) {
	v := obj.GetAnnotations()[AnnotationOrphanedFrom]
	var ref orphanRef
	if v == "" || json.Unmarshal([]byte(v), &ref) != nil {
		return orphanRef{}, false
	}
	return ref, ref.APIVersion != "" && ref.Kind != "" && ref.Name != "" && ref.UID != ""
}

// splitParentRef splits the value of AnnotationParent: "namespace/name",
// or "name".
func splitParentRef(v string) (namespace, name string) {
	namespace, name, _ = strings.Cut(v, "/")
	if name == "" {
		namespace, name = "", namespace
	}
	return namespace, name
}

// ownerState returns ownerGone when the object of kind gvk at namespace and
// name that an object names as its owner (relation: "belongs to") is gone,
// or is another object now; else a sentence saying why the object is left
// alone.
func (r *Reconciler) ownerState(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string, uid types.UID, relation string) string {
	mapping, err := r.cfg.Resources.ResourceFor(gvk)
	if err != nil {
		return fmt.Sprintf("%s %s %s, whose kind kgen cannot resolve (%v)", relation, gvk.Kind, name, err)
	}
	if !mapping.Namespaced {
		namespace = ""
	}
	live, err := r.resource(mapping, namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return ownerGone
	case err != nil:
		return fmt.Sprintf("%s %s %s, which kgen cannot read (%v)", relation, gvk.Kind, name, err)
	case live.GetUID() != uid:
		return ownerGone // the name now belongs to another object
	}
	where := name
	if namespace != "" {
		where = namespace + "/" + name
	}
	return fmt.Sprintf("%s %s %s, which exists", relation, gvk.Kind, where)
}

// ownManager reports whether a field manager is one of kgen's own: kgen,
// and kgen-<part> (kgen-finalizer, kgen-shard), which never change what a
// template sets.
func ownManager(name string) bool {
	return name == FieldManager || strings.HasPrefix(name, FieldManager+"-")
}

// lastWriter names who changed a child that kgen repairs, as
// " (changed by NAME)" (see changedBy); "" when the managed fields do not
// say, or when no Repaired event is recorded to say it in.
func (r *Reconciler) lastWriter(ctx context.Context, client dynamic.ResourceInterface, obj, desired *unstructured.Unstructured) string {
	if !r.events.records(EventRepaired) {
		return ""
	}
	if who, _ := r.changedBy(ctx, client, obj, desired); who != "" {
		return " (changed by " + who + ")"
	}
	return ""
}

// changedBy reads a child and tells which of the template's fields differ
// in it (as Differences finds them) and who changed it, from its managed
// fields: the writer that owns a differing field (a writer that changes a
// field kgen applied takes its ownership); among several, the latest, and
// an entry with no time (kubectl scale writes through the scale
// subresource, whose entries have none) only when no timed one does. Only
// when no entry owns a differing field is it the latest writer of
// anything; "" when none is known. It reads the object: the cache keeps
// no managed fields.
func (r *Reconciler) changedBy(ctx context.Context, client dynamic.ResourceInterface, obj, desired *unstructured.Unstructured) (who string, differ []string) {
	live, err := client.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return "", nil
	}
	differ = Differences(desired.Object, live.Object, r.kind(desired.GroupVersionKind()))
	var newest, touching, untimed *metav1.ManagedFieldsEntry
	later := func(a, b *metav1.ManagedFieldsEntry) bool { return b == nil || a.Time.After(b.Time.Time) }
	fields := live.GetManagedFields()
	for i, e := range fields {
		if ownManager(e.Manager) || e.Subresource == "status" {
			continue
		}
		owns := false
		if e.FieldsV1 != nil {
			set := &fieldpath.Set{}
			if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err == nil {
				owns = ownsAny(set, differ)
			}
		}
		switch {
		case e.Time == nil:
			if owns && untimed == nil {
				untimed = &fields[i]
			}
		case owns:
			if later(&e, touching) {
				touching = &fields[i]
			}
		default:
			if later(&e, newest) {
				newest = &fields[i]
			}
		}
	}
	for _, e := range []*metav1.ManagedFieldsEntry{touching, untimed, newest} {
		if e != nil {
			return e.Manager, differ
		}
	}
	return "", differ
}

// ownsAny reports whether a managed-fields set owns one of the paths
// (written as Differences writes them), or a field under one: a list that
// differs whole, or a map key whose value is a map.
func ownsAny(set *fieldpath.Set, paths []string) bool {
	found := false
	set.Leaves().Iterate(func(owned fieldpath.Path) {
		o := pathString(owned)
		for _, p := range paths {
			if !found && strings.HasPrefix(o, p) && (len(o) == len(p) || o[len(p)] == '.' || o[len(p)] == '[') {
				found = true
			}
		}
	})
	return found
}

// pathString writes a managed-fields path as Differences writes paths:
// spec.replicas, metadata.labels[app.kubernetes.io/name], an element of a
// keyed list by its keys ([name=app]), of another list by its index.
func pathString(p fieldpath.Path) string {
	var b strings.Builder
	for _, pe := range p {
		switch {
		case pe.FieldName != nil && plainField.MatchString(*pe.FieldName):
			b.WriteString("." + *pe.FieldName)
		case pe.FieldName != nil:
			b.WriteString("[" + *pe.FieldName + "]")
		case pe.Key != nil:
			parts := make([]string, 0, len(*pe.Key))
			for _, f := range *pe.Key {
				parts = append(parts, fmt.Sprintf("%s=%v", f.Name, f.Value.Unstructured()))
			}
			b.WriteString("[" + strings.Join(parts, ",") + "]")
		case pe.Index != nil:
			fmt.Fprintf(&b, "[%d]", *pe.Index)
		default:
			b.WriteString("[?]") // a set's value: Differences names the set whole
		}
	}
	return strings.TrimPrefix(b.String(), ".")
}

// upgradeOwnership moves the fields an older kgen owns through an Update
// entry (it created children with POST) into kgen's apply entry, once per
// such child, before kgen first applies it: otherwise a field a later
// template drops would stay. The cache keeps exactly that entry of an
// object's managed fields (see watch), so most children need nothing. It
// reads the object through reader and writes through client.
func (r *Reconciler) upgradeOwnership(ctx context.Context, reader, client dynamic.ResourceInterface, obj *unstructured.Unstructured) error {
	legacy := false
	for _, e := range obj.GetManagedFields() {
		if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate && e.Subresource == "" {
			legacy = true
		}
	}
	if !legacy {
		return nil
	}
	live, err := reader.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	patch, err := csaupgrade.UpgradeManagedFieldsPatch(live, sets.New(FieldManager), FieldManager)
	if err != nil || patch == nil {
		return err
	}
	_, err = client.Patch(ctx, obj.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
	return err
}

// takeCoOwned runs after kgen adopted an object: it takes from the Update
// entries of other managers the fields kgen's apply entry owns too, so that
// a field a later template drops is removed (contract section 6: template
// changes land whole). A child restored from a backup was created with
// POST by the restoring tool, whose entry owns every field; the apply
// leaves that ownership, and the API server never removes a field another
// manager owns. Fields only they own stay theirs. Only at an adoption: an
// Update entry otherwise owns a field kgen applies only where its writer
// set that value itself, which kgen keeps. The write is conditional on the
// resourceVersion, read again on a conflict. It returns the object as
// written (obj when nothing was). When it fails, the child is owed it
// (Reconciler.owed): the next reconcile tries again. (A child restored
// while its parent still exists, with this parent's marks, is not adopted,
// and keeps the restorer's co-ownership.)
func (r *Reconciler) takeCoOwned(ctx context.Context, reader, client dynamic.ResourceInterface, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	for try := 0; ; try++ {
		patch, err := coOwnedPatch(obj)
		if err != nil || patch == nil {
			return obj, err
		}
		out, err := client.Patch(ctx, obj.GetName(), types.JSONPatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return out, nil
		}
		// A JSON patch whose test fails is answered 422 Invalid.
		if !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) || try == 2 {
			return obj, err
		}
		if obj, err = reader.Get(ctx, obj.GetName(), metav1.GetOptions{}); err != nil {
			return obj, err
		}
	}
}

// coOwnedPatch is the JSON patch of takeCoOwned: the object's managed
// fields with kgen's apply entry's fields taken out of other managers'
// Update entries (an entry left with none is dropped), under a test of
// its resourceVersion; nil if no such entry owns one of kgen's fields.
func coOwnedPatch(obj *unstructured.Unstructured) ([]byte, error) {
	entries := obj.GetManagedFields()
	var ours *fieldpath.Set
	for _, e := range entries {
		if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" && e.FieldsV1 != nil {
			ours = &fieldpath.Set{}
			if err := ours.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
				return nil, fmt.Errorf("kgen's managed fields of %s: %w", obj.GetName(), err)
			}
		}
	}
	if ours == nil {
		return nil, nil
	}
	out := make([]metav1.ManagedFieldsEntry, 0, len(entries))
	changed := false
	for _, e := range entries {
		if ownManager(e.Manager) || e.Operation != metav1.ManagedFieldsOperationUpdate || e.Subresource != "" || e.FieldsV1 == nil {
			out = append(out, e)
			continue
		}
		theirs := &fieldpath.Set{}
		if err := theirs.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			return nil, fmt.Errorf("the managed fields of %s of %s: %w", e.Manager, obj.GetName(), err)
		}
		if theirs.Intersection(ours).Empty() {
			out = append(out, e)
			continue
		}
		changed = true
		rest := theirs.Difference(ours)
		if rest.Empty() {
			continue
		}
		raw, err := rest.ToJSON()
		if err != nil {
			return nil, err
		}
		e.FieldsV1 = &metav1.FieldsV1{Raw: raw}
		out = append(out, e)
	}
	if !changed {
		return nil, nil
	}
	return json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": obj.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": out},
	})
}

// Removed returns the fields of a child that kgen's last apply set and
// that desired no longer sets (as Differences writes paths): what kgen's
// next apply removes. It reads kgen's apply entry of live's managed
// fields; none when live has none (a cached object, which keeps no
// managed fields, or one kgen never applied). A removed list entry or map
// is named once, not field by field.
func Removed(desired, live *unstructured.Unstructured) []string {
	var out []string
	for _, e := range live.GetManagedFields() {
		if e.Manager != FieldManager || e.Operation != metav1.ManagedFieldsOperationApply || e.Subresource != "" || e.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			continue
		}
		set.Leaves().Iterate(func(p fieldpath.Path) {
			if i, keys := absentAt(desired.Object, p); i >= 0 {
				if p[i].Value != nil {
					i-- // a set's value: the set is named, as Differences does
				}
				named := slices.Clone(p[:i+1])
				if pe := named[i]; pe.Key != nil && keys != nil {
					// By the key fields the template's entries set, as
					// Differences names its entries ("[port=8081]"),
					// not those the server defaulted ("protocol=TCP").
					var kept value.FieldList
					for _, f := range *pe.Key {
						if slices.Contains(keys, f.Name) {
							kept = append(kept, f)
						}
					}
					if len(kept) > 0 {
						named[i] = fieldpath.PathElement{Key: &kept}
					}
				}
				out = append(out, pathString(named))
			}
		})
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// absentAt returns the index of the first element of a managed-fields
// path that obj does not have, or -1 when it has the whole path; for an
// entry of a keyed list, also the key fields that obj's entries of that
// list set (nil when it has no such list).
func absentAt(obj any, p fieldpath.Path) (int, []string) {
	for i, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, _ := obj.(map[string]any)
			v, ok := m[*pe.FieldName]
			if !ok {
				return i, nil
			}
			obj = v
		case pe.Key != nil:
			list, _ := obj.([]any)
			j := slices.IndexFunc(list, func(el any) bool {
				m, ok := el.(map[string]any)
				if !ok {
					return false
				}
				// A key field the template leaves out is the server's
				// default (a port's protocol: TCP): it matches.
				for _, f := range *pe.Key {
					if v, ok := m[f.Name]; ok && fmt.Sprint(v) != fmt.Sprint(f.Value.Unstructured()) {
						return false
					}
				}
				return true
			})
			if j < 0 {
				var keys []string
				for _, el := range list {
					m, _ := el.(map[string]any)
					for _, f := range *pe.Key {
						if _, set := m[f.Name]; set && !slices.Contains(keys, f.Name) {
							keys = append(keys, f.Name)
						}
					}
				}
				return i, keys
			}
			obj = list[j]
		case pe.Value != nil:
			list, _ := obj.([]any)
			j := slices.IndexFunc(list, func(el any) bool { return fmt.Sprint(el) == fmt.Sprint((*pe.Value).Unstructured()) })
			if j < 0 {
				return i, nil
			}
			obj = list[j]
		case pe.Index != nil:
			list, _ := obj.([]any)
			if *pe.Index >= len(list) {
				return i, nil
			}
			obj = list[*pe.Index]
		}
	}
	return -1, nil
}
