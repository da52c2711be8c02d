package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	clientretry "k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/shard"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// Children of kinds that left a rule.
//
// A rule's children are found through the informers of its child kinds.
// When a kind leaves the rule (its last child of that kind is removed, or a
// child's kind or namespace changes) nothing would watch those children any
// more, and they would never be pruned. So kgen records, per rule, where it
// may have made children: its child scopes, a kind and a namespace ("" for
// every namespace) each, as its child informers watch them. The record is
// kept where it survives restarts (a Record: the ConfigMap kgen-state in
// kgen's namespace), and written only when a rule's scopes change, never
// per parent.
//
// When a rule starts, the scopes of its record that the rule no longer
// covers are watched too, with the usual child selector: prune-only
// informers. Their objects belong to no child of the rule (an id it no
// longer has, another kind, another namespace), so each reconcile prunes
// them (reconcile.MakePlan). Once none of them belongs to a parent of the
// rule any more (seen on two passes of the activation loop in a row), the
// informer is released and the scope leaves the record. A rule changed
// while kgen runs starts the same way: its new version starts from what
// its old version recorded, which kgen keeps in memory too.
//
// The same Record keeps where each rule watched its parents, so that
// parents where no rule looks any more are released (parents.go), and the
// version of each rule that last started (rules.Rule.Version), so that a
// rule that ran before is known as such after a restart: Config.Admit
// starts it past a type error its CRD's change, made while kgen was
// stopped, brings, as a running rule keeps running through one.
//
// Under sharding every replica writes the Record, so a write changes only
// what this replica learned (Record.Update: scopes added, and removed),
// on what the Record holds at that moment, and only one replica removes
// scopes: the shard the ring gives the rule, which judges a prune-only
// scope empty against every parent of the rule (removesFromRecord).
//
// A Record kgen cannot read or write (its RBAC lacks the ConfigMap, as
// under a chart from before the record) does not stop the rules: the
// failure is logged, at most once a minute, and in RuleState.RecordError,
// and every pass tries again. Meanwhile kinds that leave a rule are still
// pruned from memory, but children of a kind that left a rule while kgen
// was stopped are not found until the Record can be read. The Record is
// never written before it was read: that would drop what it holds.

// ChildScope is where some of a rule's children may be: objects of one
// kind, in one namespace, or in every namespace ("", also for a
// cluster-scoped kind). It is what one child informer watches.
type ChildScope struct {
	GroupVersionKind schema.GroupVersionKind
	Namespace        string
}

func (s ChildScope) String() string {
	out := s.GroupVersionKind.GroupVersion().String() + " " + s.GroupVersionKind.Kind
	if s.Namespace != "" {
		out += " " + s.Namespace
	}
	return out
}

// covers tells whether scope a covers scope b: same group and kind (the
// version may differ), and every namespace or b's.
func (a ChildScope) covers(b ChildScope) bool {
	return a.GroupVersionKind.GroupKind() == b.GroupVersionKind.GroupKind() && (a.Namespace == "" || a.Namespace == b.Namespace)
}

// compareScopes orders scopes by their text.
func compareScopes(a, b ChildScope) int { return strings.Compare(a.String(), b.String()) }

// Recorded is what a Record holds, by rule: where the rule may have made
// children, and where it watched its parents (a scope of the parent kind per
// watched namespace, "" for every namespace or a cluster-scoped kind).
type Recorded struct {
	Children map[string][]ChildScope
	Parents  map[string][]ChildScope
	// Running is the version of each rule that last started
	// (rules.Rule.Version).
	Running map[string]string
	// Documents is, of each rule in Running whose record has it, that
	// version's document (rules.Rule.Document). Only a file's rules have
	// one.
	Documents map[string][]byte
}

// Record keeps the child and parent scopes of every rule where they
// survive a restart of kgen. Only the leader writes it; under sharding,
// every replica does (see Controller.removesFromRecord).
type Record interface {
	// Load returns what is recorded.
	Load(ctx context.Context) (Recorded, error)
	// Update adds scopes to a rule's child scopes and removes others,
	// leaving every other scope as it is, and returns what the record
	// holds for the rule afterwards: another replica's scopes, written
	// since this one read them, are kept.
	Update(ctx context.Context, rule string, add, remove []ChildScope) ([]ChildScope, error)
	// UpdateParents does the same to a rule's parent scopes.
	UpdateParents(ctx context.Context, rule string, add, remove []ChildScope) ([]ChildScope, error)
	// UpdateRunning records the version of a rule that started, with its
	// document (nil if it has none); version "" removes the rule's
	// entry.
	UpdateRunning(ctx context.Context, rule, version string, document []byte) error
}

// DefaultRecordName is the name of the ConfigMap of a ConfigMapRecord.
const DefaultRecordName = "kgen-state"

// ConfigMapRecord keeps the record in a ConfigMap: one key per rule (a rule
// name is a valid key) for its child scopes, and one, the rule's name with
// ParentsKeySuffix, for its parent scopes (no rule name has a "_", so the
// two never meet), whose values have a line per scope,
// "APIVERSION KIND [NAMESPACE]", and one, with RunningKeySuffix, for the
// version of the rule that last started, and, for a file's rule, one with
// DocumentKeySuffix for that version's document:
//
//	data:
//	  webapp: |
//	    apps/v1 Deployment
//	    v1 ConfigMap team-a
//	  webapp_parents: |
//	    example.com/v1 WebApp team-a
//	  webapp_running: sha256:9f86d0…
//	  webapp_document: '{"apiVersion":"kgen.dev/v1alpha1","kind":"Rule","metadata":{"name":"webapp"},"spec":{…}}'
//
// It reads the ConfigMap with get and changes one key at a time: it reads
// the ConfigMap, adds and removes scopes in the key's value, and writes the
// key with a JSON merge patch pinned to the resource version it read,
// reading again and retrying if another writer changed the ConfigMap
// meanwhile; so writers never undo each other's changes, of one rule's key
// (replicas under sharding) or of different ones. It creates the
// ConfigMap, when it is missing, by a server-side apply of its metadata
// only. Every request names the ConfigMap, so RBAC can grant exactly it
// (resourceNames).
//
// With Resource set, every write also keeps ReleaseAnnotation and
// ReleaseChildrenAnnotation true.
type ConfigMapRecord struct {
	Client corev1client.ConfigMapsGetter
	// Namespace is kgen's own namespace; Name is DefaultRecordName when
	// empty.
	Namespace, Name string
	// Resource maps a recorded kind to its resource, for
	// ReleaseAnnotation and ReleaseChildrenAnnotation; nil leaves the
	// annotations alone.
	Resource func(schema.GroupVersionKind) (schema.GroupResource, error)
}

// ReleaseAnnotation, on the record's ConfigMap, names the parent resources
// the record holds, by namespace ("" for every namespace, or a
// cluster-scoped kind), as JSON: {"team-b": ["webapps.example.com"]}.
// These are where kgen must still be able to list its parents and patch
// them, to remove its finalizer, after a rule stops watching there: the
// rights go with the rule, at once, while the record drops a scope only
// once it is swept. The chart reads it (Helm's lookup) and keeps the list
// and patch there that the release grants kgen and the new values no
// longer do, so an upgrade that narrows a rule's namespaces, or removes a
// rule, leaves no parent holding kgen's finalizer; it never grants more
// from it. A kind the API server no longer serves is
// left out: its objects went with it.
const ReleaseAnnotation = "kgen.dev/release"

// ReleaseChildrenAnnotation, on the record's ConfigMap, names the child
// resources the record holds for the rules that run (that have a running
// version: a removed rule's children stay, and need no right), by
// namespace, as ReleaseAnnotation does the parent ones. These are where kgen must still be able to list, watch,
// delete and patch children after a rule stops making them (a child id
// removed, the last of its kind), to prune them or let them go: the chart
// keeps those rights that the release grants kgen and the new values no
// longer do (a live audit: an upgrade with the RBAC kgenctl rbac derives
// from the new rules left the children of a removed id in place, and
// their parents Forbidden), until kgen has pruned them and swept the
// scope.
const ReleaseChildrenAnnotation = "kgen.dev/release-children"

// ParentsKeySuffix ends the key of a ConfigMapRecord that holds a rule's
// parent scopes.
const ParentsKeySuffix = "_parents"

// RunningKeySuffix ends the key of a ConfigMapRecord that holds the version
// of a rule that last started. A kgen from before it reads the key as a
// rule's child scopes with a line that is not a scope, which it logs and
// leaves out.
const RunningKeySuffix = "_running"

// DocumentKeySuffix ends the key of a ConfigMapRecord that holds the
// document of the version of a rule that last started (rules.Rule.Document),
// from which a restart runs it in place of a file's version that does not
// fit. A kgen from before it reads the key as a rule's child scopes with a
// line that is not a scope, which it logs and leaves out.
const DocumentKeySuffix = "_document"

// documentsBudget bounds the bytes of the documents a ConfigMapRecord
// holds, well under a ConfigMap's 1 MiB: the record's scopes, which kgen
// needs to prune, must always fit. A rule whose document would pass it
// has its version recorded alone.
const documentsBudget = 512 << 10

var _ Record = (*ConfigMapRecord)(nil)

func (r *ConfigMapRecord) name() string {
	if r.Name == "" {
		return DefaultRecordName
	}
	return r.Name
}

// Load reads the ConfigMap; a missing one records nothing. A line that is
// not a scope is logged and left out. With Resource set, it also brings
// ReleaseAnnotation up to date (annotate).
func (r *ConfigMapRecord) Load(ctx context.Context) (Recorded, error) {
	out := Recorded{Children: map[string][]ChildScope{}, Parents: map[string][]ChildScope{}, Running: map[string]string{}, Documents: map[string][]byte{}}
	cm, err := r.Client.ConfigMaps(r.Namespace).Get(ctx, r.name(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return out, nil
	}
	if err != nil {
		return Recorded{}, fmt.Errorf("read the record of the rules' kinds, ConfigMap %s/%s: %w", r.Namespace, r.name(), err)
	}
	for key, value := range cm.Data {
		if rule, ok := strings.CutSuffix(key, RunningKeySuffix); ok {
			out.Running[rule] = strings.TrimSpace(value)
			continue
		}
		if rule, ok := strings.CutSuffix(key, DocumentKeySuffix); ok {
			out.Documents[rule] = []byte(value)
			continue
		}
		scopes, bad := decodeScopes(value)
		rule, parents := strings.CutSuffix(key, ParentsKeySuffix)
		for _, line := range bad {
			klog.FromContext(ctx).Info("Ignoring a line of the record of the rules' kinds that is not a scope", "configMap", klog.KObj(cm), "key", key, "line", line)
		}
		if parents {
			out.Parents[rule] = scopes
		} else {
			out.Children[rule] = scopes
		}
	}
	r.annotate(ctx, cm)
	return out, nil
}

// annotate brings ReleaseAnnotation up to date on a record read, which an
// older kgen wrote without it: the writes that keep it true come only with
// a change of the scopes. A failure is logged; the next change of the
// record, or the next start, writes it.
// Under sharding replicas race to it: the one that loses (a conflict)
// stays quiet.
func (r *ConfigMapRecord) annotate(ctx context.Context, cm *corev1.ConfigMap) {
	annotations := r.releases(ctx, cm.Data, "", nil, cm.Annotations)
	if len(annotations) == 0 {
		return
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": cm.ResourceVersion,
		"annotations":     annotations,
	}})
	if err == nil {
		_, err = r.Client.ConfigMaps(r.Namespace).Patch(ctx, r.name(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: reconcile.FieldManager})
	}
	if err != nil && !apierrors.IsConflict(err) { // another writer changed it: a replica that wrote it, or the next change will
		klog.FromContext(ctx).Info("Could not note in the record where kgen must still release parents and prune children", "configMap", klog.KObj(cm), "err", err)
	}
}

// Update changes the rule's key of child scopes, creating the ConfigMap if
// it is missing.
func (r *ConfigMapRecord) Update(ctx context.Context, rule string, add, remove []ChildScope) ([]ChildScope, error) {
	out, err := r.update(ctx, rule, add, remove)
	if err != nil {
		return nil, fmt.Errorf("record the child kinds of rule %s in ConfigMap %s/%s: %w", rule, r.Namespace, r.name(), err)
	}
	return out, nil
}

// UpdateParents changes the rule's key of parent scopes, creating the
// ConfigMap if it is missing.
func (r *ConfigMapRecord) UpdateParents(ctx context.Context, rule string, add, remove []ChildScope) ([]ChildScope, error) {
	out, err := r.update(ctx, rule+ParentsKeySuffix, add, remove)
	if err != nil {
		return nil, fmt.Errorf("record the parent kinds of rule %s in ConfigMap %s/%s: %w", rule, r.Namespace, r.name(), err)
	}
	return out, nil
}

// UpdateRunning writes the rule's keys of its running version and of its
// document, creating the ConfigMap if it is missing; version "" removes
// them. The document is left out (and its key removed) when the
// documents the record holds would pass documentsBudget with it, or it
// is nil.
func (r *ConfigMapRecord) UpdateRunning(ctx context.Context, rule, version string, document []byte) error {
	key, docKey := rule+RunningKeySuffix, rule+DocumentKeySuffix
	err := r.writeKeys(ctx, version != "", func(cm *corev1.ConfigMap) (map[string]any, map[string]any, bool) {
		var value, doc any // null removes a key
		if version != "" {
			value = version
			size := len(document)
			for k, v := range cm.Data {
				if strings.HasSuffix(k, DocumentKeySuffix) && k != docKey {
					size += len(v)
				}
			}
			switch {
			case len(document) > 0 && size <= documentsBudget:
				doc = string(document)
			case len(document) > 0:
				klog.FromContext(ctx).Info("Not recording the document of a rule's running version: the record's documents would pass their budget; a restart cannot run this version in place of a new one that does not fit", "rule", rule, "budget", documentsBudget)
			}
		}
		data := map[string]any{key: value, docKey: doc}
		// A rule that runs, or no longer does, has its children in
		// ReleaseChildrenAnnotation, or no longer has.
		annotations := r.releases(ctx, cm.Data, key, value, cm.Annotations)
		oldDoc, hadDoc := cm.Data[docKey]
		newDoc, _ := doc.(string)
		write := cm.Data[key] != version || hadDoc != (doc != nil) || oldDoc != newDoc || len(annotations) > 0
		return data, annotations, write
	})
	if err != nil {
		return fmt.Errorf("record the running version of rule %s in ConfigMap %s/%s: %w", rule, r.Namespace, r.name(), err)
	}
	return nil
}

// writeKey changes one key of the ConfigMap, as writeKeys, with change
// answering the key's value.
func (r *ConfigMapRecord) writeKey(ctx context.Context, key string, create bool, change func(cm *corev1.ConfigMap) (value any, annotations map[string]any, write bool)) error {
	return r.writeKeys(ctx, create, func(cm *corev1.ConfigMap) (map[string]any, map[string]any, bool) {
		value, annotations, write := change(cm)
		return map[string]any{key: value}, annotations, write
	})
}

// writeKeys changes keys of the ConfigMap: it reads the ConfigMap
// (creating it when it is missing, if create), asks change for the keys'
// new values (nil removes one), annotations to set with them (a nil value
// removes one), and whether to write; and writes them with a JSON merge
// patch pinned to the resource version it read, reading again and asking
// change again while another writer wins. A missing ConfigMap that is not
// created is left alone, and change is not asked.
func (r *ConfigMapRecord) writeKeys(ctx context.Context, create bool, change func(cm *corev1.ConfigMap) (data, annotations map[string]any, write bool)) error {
	client := r.Client.ConfigMaps(r.Namespace)
	return clientretry.RetryOnConflict(clientretry.DefaultRetry, func() error {
		cm, err := client.Get(ctx, r.name(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if !create {
				return nil
			}
			cm, err = r.create(ctx)
		}
		if err != nil {
			return err
		}
		data, annotations, write := change(cm)
		if !write {
			return nil
		}
		meta := map[string]any{"resourceVersion": cm.ResourceVersion}
		if len(annotations) > 0 {
			meta["annotations"] = annotations
		}
		patch, err := json.Marshal(map[string]any{"metadata": meta, "data": data})
		if err != nil {
			return err
		}
		_, err = client.Patch(ctx, r.name(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: reconcile.FieldManager})
		return err
	})
}

// create makes the missing ConfigMap by an apply of its metadata alone;
// two kgens that race to create it apply the same, and neither loses a key.
func (r *ConfigMapRecord) create(ctx context.Context) (*corev1.ConfigMap, error) {
	empty := []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"labels":{%q:%q}}}`,
		r.name(), r.Namespace, reconcile.LabelManagedBy, reconcile.ManagedBy))
	force := true
	return r.Client.ConfigMaps(r.Namespace).Patch(ctx, r.name(), types.ApplyPatchType, empty, metav1.PatchOptions{FieldManager: reconcile.FieldManager, Force: &force})
}

// update changes one key: a read, and a write pinned to what was read,
// again while another writer wins; no write if nothing changes. A key left
// with no scopes is removed.
func (r *ConfigMapRecord) update(ctx context.Context, key string, add, remove []ChildScope) ([]ChildScope, error) {
	var out []ChildScope
	err := r.writeKey(ctx, key, len(add) > 0, func(cm *corev1.ConfigMap) (any, map[string]any, bool) {
		current, _ := decodeScopes(cm.Data[key])
		current = sortScopes(current)
		next := slices.DeleteFunc(sortScopes(append(slices.Clone(current), add...)), func(s ChildScope) bool {
			return slices.Contains(remove, s)
		})
		out = next
		var value any // null removes the key
		if len(next) > 0 {
			value = encodeScopes(next)
		}
		if annotations := r.releases(ctx, cm.Data, key, value, cm.Annotations); len(annotations) > 0 {
			return value, annotations, true
		}
		return value, nil, !slices.Equal(current, next)
	})
	return out, err
}

// releases returns the changes of ReleaseAnnotation and
// ReleaseChildrenAnnotation (a value, or nil to remove one) for the
// record's data with key set to value (nil removes it), where the
// ConfigMap has annotations; none without a Resource.
func (r *ConfigMapRecord) releases(ctx context.Context, data map[string]string, key string, value any, annotations map[string]string) map[string]any {
	changes := map[string]any{}
	for _, a := range []struct {
		name     string
		children bool
	}{{ReleaseAnnotation, false}, {ReleaseChildrenAnnotation, true}} {
		release, ok := r.release(ctx, data, key, value, annotations[a.name], a.children)
		if !ok || release == annotations[a.name] {
			continue
		}
		var v any // null removes the annotation
		if release != "" {
			v = release
		}
		changes[a.name] = v
	}
	return changes
}

// release returns ReleaseAnnotation's value (or, with children,
// ReleaseChildrenAnnotation's) for the record's data with key set to
// value (nil removes it): "" when it holds no such scope; false when
// there is no Resource. A kind that cannot be mapped for now keeps what
// the previous value said of its group in its namespace.
func (r *ConfigMapRecord) release(ctx context.Context, data map[string]string, key string, value any, previous string, children bool) (string, bool) {
	if r.Resource == nil {
		return "", false
	}
	data = maps.Clone(data)
	if v, ok := value.(string); ok {
		if data == nil {
			data = map[string]string{}
		}
		data[key] = v
	} else {
		delete(data, key)
	}
	var before map[string][]string
	_ = json.Unmarshal([]byte(previous), &before) // not ours, or not JSON: nothing to keep
	byNamespace := map[string][]string{}
	for k, v := range data {
		if strings.HasSuffix(k, RunningKeySuffix) || strings.HasSuffix(k, DocumentKeySuffix) || strings.HasSuffix(k, ParentsKeySuffix) == children {
			continue
		}
		if _, runs := data[k+RunningKeySuffix]; children && !runs {
			// A removed rule's children stay: it keeps its entry (for
			// a rule that takes its parents over), and needs no right
			// on them.
			continue
		}
		scopes, _ := decodeScopes(v)
		for _, s := range scopes {
			gr, err := r.Resource(s.GroupVersionKind)
			if errors.Is(err, mapper.ErrNotFound) {
				continue
			}
			if err != nil {
				// Discovery of its group failed: what the annotation
				// said of the group there stays (the chart grants no
				// more than kgen held), and the rest is written.
				klog.FromContext(ctx).V(2).Info("Cannot name the resource of a recorded kind for now; keeping what the record said of its group", "kind", s.GroupVersionKind, "err", err)
				for _, name := range before[s.Namespace] {
					if gr := schema.ParseGroupResource(name); gr.Group == s.GroupVersionKind.Group {
						byNamespace[s.Namespace] = append(byNamespace[s.Namespace], name)
					}
				}
				continue
			}
			byNamespace[s.Namespace] = append(byNamespace[s.Namespace], gr.String())
		}
	}
	if len(byNamespace) == 0 {
		return "", true
	}
	for ns, grs := range byNamespace {
		slices.Sort(grs)
		byNamespace[ns] = slices.Compact(grs)
	}
	out, err := json.Marshal(byNamespace) // keys sorted
	if err != nil {
		return "", false
	}
	return string(out), true
}

// GroupResourceOf returns a ConfigMapRecord's Resource from a Mapper: the
// resource of a kind in any version the API server serves (a CRD may have
// stopped serving the recorded version; its objects are still there). It
// reads what the Mapper knows: a kind it does not know never costs a read
// of discovery (a rule waiting for its CRD keeps one in the record, and
// every write of the record asks again).
func GroupResourceOf(m *mapper.Mapper) func(schema.GroupVersionKind) (schema.GroupResource, error) {
	return func(gvk schema.GroupVersionKind) (schema.GroupResource, error) {
		found, err := m.CachedAnyVersion(gvk)
		if err != nil {
			return schema.GroupResource{}, err
		}
		return schema.GroupResource{Group: found.Group, Resource: found.Resource}, nil
	}
}

// minus returns the scopes of a that b lacks.
func minus(a, b []ChildScope) []ChildScope {
	var out []ChildScope
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

// encodeScopes writes scopes a line each, sorted.
func encodeScopes(scopes []ChildScope) string {
	lines := make([]string, 0, len(scopes))
	for _, s := range scopes {
		lines = append(lines, s.String())
	}
	slices.Sort(lines)
	return strings.Join(slices.Compact(lines), "\n") + "\n"
}

// decodeScopes reads what encodeScopes wrote, and returns the lines that
// are not scopes.
func decodeScopes(value string) (scopes []ChildScope, bad []string) {
	for _, line := range strings.Split(value, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 2 || len(fields) > 3 {
			bad = append(bad, line)
			continue
		}
		gv, err := schema.ParseGroupVersion(fields[0])
		if err != nil || gv.Version == "" {
			bad = append(bad, line)
			continue
		}
		s := ChildScope{GroupVersionKind: gv.WithKind(fields[1])}
		if len(fields) == 3 {
			s.Namespace = fields[2]
		}
		scopes = append(scopes, s)
	}
	return scopes, bad
}

// childScopes returns the scopes a rule's child informers watch, from the
// namespaces its placement gives each child kind.
func childScopes(kinds map[schema.GroupVersionKind][]string, m *mapper.Mapper) ([]ChildScope, error) {
	var out []ChildScope
	for _, gvk := range sortedKinds(kinds) {
		mapping, err := m.ResourceFor(gvk)
		if err != nil {
			return nil, fmt.Errorf("kind %s: %w", gvk, err)
		}
		namespaces := kinds[gvk]
		if !mapping.Namespaced {
			namespaces = []string{metav1.NamespaceAll}
		}
		for _, ns := range namespaces {
			out = append(out, ChildScope{GroupVersionKind: gvk, Namespace: ns})
		}
	}
	slices.SortFunc(out, compareScopes)
	return slices.Compact(out), nil
}

// uncovered returns the recorded scopes that none of current covers.
func uncovered(recorded, current []ChildScope) []ChildScope {
	var out []ChildScope
	for _, r := range recorded {
		if !slices.ContainsFunc(current, func(c ChildScope) bool { return c.covers(r) }) {
			out = append(out, r)
		}
	}
	return out
}

// pruneWatch is an informer of a scope the rule's record holds and the
// rule no longer covers: it is watched only so that its children are
// pruned.
type pruneWatch struct {
	scope ChildScope
	reg   *watch.Registration
	// inherited is set for a scope of a removed rule's record (see
	// inheritedLocked), which is not written to this rule's record;
	// refusals counts the passes that found its list refused.
	inherited bool
	refusals  int
	// empty is set when a pass found no child of the rule's parents in
	// it; a second such pass drops it.
	empty bool
}

// recordState is what the controller knows of its Record; guarded by
// Controller.mu.
type recordState struct {
	// want is what the record should hold, by rule: what the Record held
	// when it was read, and every change since, written or not. It is
	// what a rule that starts prunes from, so kinds that leave a rule
	// while kgen runs are pruned even when the Record cannot be used.
	want map[string][]ChildScope
	// loaded is set once the Record was read (and merged into want);
	// saved is what it holds, by rule, as read or last written.
	loaded bool
	saved  map[string][]ChildScope
	// fresh are the scopes the Record held, by rule, that no
	// watchRecorded of the rule has looked at yet: a write keeps them.
	fresh map[string][]ChildScope
	// logged is when a failure to read or write the record was last
	// logged, by rule.
	logged map[string]time.Time
	// parents is what the record should hold of where rules watched
	// their parents, by rule: what it held when read, and the scopes of
	// every version of the rule started since, until sweepParents has
	// looked at a scope no rule covers any more. savedParents is what it
	// holds, as read or last written.
	parents, savedParents map[string][]ChildScope
	// sweeps are the parent scopes whose sweep failed, and when each may
	// be tried again; sweeping is set while a sweep runs.
	sweeps   map[ChildScope]sweepRetry
	sweeping bool
	// letGo are the recorded parent scopes, by rule, of rules that are not
	// loaded and whose parents kgen let go, with their children (contract
	// §7): removed while kgen runs with no rule new or changed in the same
	// change that may select their parents, or found covered by no rule
	// once every rule is loaded (markLetGoLocked). A rule that selects
	// them later does not inherit the rule's child kinds
	// (inheritedLocked), even before the sweep drops the scopes from the
	// record (it sweeps them even once covered). A rule renamed in one
	// edit is not let go: the new name takes over, as after a restart. The
	// marks are in memory: a restart before the sweep succeeded, or
	// another replica that did not see the removal, takes the later rule
	// as a rename (docs/controller.md).
	letGo map[string][]ChildScope
	// removals are the rules removed from the set, each with the rules
	// new or changed in the same change, until markLetGoLocked judges
	// them (once every rule is loaded and the record read).
	removals []removal
	// running is the version of each rule that last started, as the
	// Record held it when read or as last written (ranBefore).
	running map[string]string
	// documented tells, of each rule in running, whether the Record
	// holds its document too.
	documented map[string]bool
}

// removal is a rule removed from the set, and the rules new or changed in
// the same change: those that may take its parents over (a rename).
type removal struct {
	rule   *rules.Rule
	takers []*rules.Rule
}

// recordLogEvery bounds how often a failing read or write of the record is
// logged, per rule.
const recordLogEvery = time.Minute

// logRecordError logs a failure to read or write the record, at most once
// every recordLogEvery per rule.
func (c *Controller) logRecordError(ctx context.Context, rule string, err error) {
	c.mu.Lock()
	if c.record.logged == nil {
		c.record.logged = map[string]time.Time{}
	}
	last, seen := c.record.logged[rule]
	log := !seen || time.Since(last) >= recordLogEvery
	if log {
		c.record.logged[rule] = time.Now()
	}
	c.mu.Unlock()
	if log {
		klog.FromContext(ctx).Error(err, "Cannot use the record of the rules' child kinds; rules run, but children of kinds that leave a rule may not be pruned after a restart; trying again", "rule", rule)
	}
}

// loadRecord reads the Record unless it was read already, and merges it
// into what the controller wants recorded; the error says why it could not
// be read. Without a Record, scopes are remembered only while kgen runs.
func (c *Controller) loadRecord(ctx context.Context) error {
	c.mu.Lock()
	loaded := c.record.loaded
	c.mu.Unlock()
	if loaded {
		return nil
	}
	var recorded Recorded
	if c.cfg.Record != nil {
		var err error
		if recorded, err = c.cfg.Record.Load(ctx); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.record.loaded {
		return nil
	}
	if c.record.want == nil {
		c.record.want = map[string][]ChildScope{}
	}
	c.record.saved = map[string][]ChildScope{}
	c.record.fresh = map[string][]ChildScope{}
	if c.record.parents == nil {
		c.record.parents = map[string][]ChildScope{}
	}
	c.record.savedParents = map[string][]ChildScope{}
	c.record.running = maps.Clone(recorded.Running)
	if c.record.running == nil {
		c.record.running = map[string]string{}
	}
	c.record.documented = map[string]bool{}
	for name := range recorded.Documents {
		c.record.documented[name] = true
	}
	for rule, scopes := range recorded.Parents {
		c.record.savedParents[rule] = sortScopes(slices.Clone(scopes))
		c.record.parents[rule] = sortScopes(append(c.record.parents[rule], scopes...))
	}
	for rule, scopes := range recorded.Children {
		c.record.saved[rule] = sortScopes(scopes)
		c.record.fresh[rule] = slices.Clone(c.record.saved[rule])
		// What the Record holds and kgen learned since it started:
		// a scope pruned meanwhile is watched again, found empty and
		// dropped.
		c.record.want[rule] = sortScopes(append(slices.Clone(c.record.want[rule]), scopes...))
	}
	c.record.loaded = true
	return nil
}

// sortScopes sorts scopes and drops duplicates.
func sortScopes(scopes []ChildScope) []ChildScope {
	slices.SortFunc(scopes, compareScopes)
	return slices.Compact(scopes)
}

// settle marks an inherited scope as not to be watched again by this
// version of the rule; the caller holds Controller.mu.
func settle(rs *ruleState, s ChildScope) {
	if rs.settled == nil {
		rs.settled = map[ChildScope]bool{}
	}
	rs.settled[s] = true
}

// inheritedLocked returns the child scopes recorded for rules that are no
// longer loaded and that watched parents where this rule now does: a rule
// renamed (or replaced by another of its parents' kind) while kgen was
// stopped, or in one edit; not where this process let the parents go
// (recordState.letGo). Their children are this rule's parents' now, and a kind that
// left the rule with the rename is pruned like one that left it under its
// own name. The caller holds Controller.mu.
func (c *Controller) inheritedLocked(rs *ruleState) []ChildScope {
	return sortScopes(slices.Collect(maps.Keys(c.inheritedFromLocked(rs))))
}

// inheritedFromLocked is inheritedLocked with, for each scope, the removed
// rules it is inherited from: in an inherited scope a rule counts as its
// parents' children only the objects those rules made (see Children). The
// caller holds Controller.mu.
func (c *Controller) inheritedFromLocked(rs *ruleState) map[ChildScope][]string {
	out := map[ChildScope][]string{}
	for rule, scopes := range c.record.want {
		if rule == rs.rule.Name || c.rules[rule] != nil || c.pending[rule] != nil {
			continue
		}
		overlaps := slices.ContainsFunc(c.record.parents[rule], func(old ChildScope) bool {
			if slices.Contains(c.record.letGo[rule], old) {
				return false
			}
			return slices.ContainsFunc(rs.parentScopes, func(now ChildScope) bool { return now.covers(old) || old.covers(now) })
		})
		if overlaps {
			for _, s := range scopes {
				out[s] = append(out[s], rule)
			}
		}
	}
	return out
}

// watchRecorded starts prune-only informers, for an active rule, of the
// scopes recorded for it that the rule does not cover and that it does not
// watch yet: at its start, and again at every pass, for scopes learned
// from a Record read late or that could not be watched before. A recorded
// kind that is not served any more has no objects to prune, and is left
// out (and so leaves the record at its next write); one that cannot be
// watched for another reason is kept (RuleState.Pruning does not show it)
// and tried again at the next pass.
func (c *Controller) watchRecorded(ctx context.Context, rs *ruleState) {
	name := rs.rule.Name
	if err := c.loadRecord(ctx); err != nil {
		// What is known so far is watched.
		c.logRecordError(ctx, name, err)
	}
	// Only once every rule is known: a Rule object not read yet is not
	// a removed rule.
	allKnown := c.cfg.RulesLoaded == nil || c.cfg.RulesLoaded()
	c.mu.Lock()
	own := slices.Clone(c.record.want[name])
	recorded := slices.Clone(own)
	if allKnown {
		for _, s := range c.inheritedLocked(rs) {
			if !rs.settled[s] {
				recorded = append(recorded, s)
			}
		}
		recorded = sortScopes(recorded)
	}
	delete(c.record.fresh, name)
	current := slices.Clone(rs.scopes)
	watched := map[ChildScope]bool{}
	for _, p := range rs.pruning {
		watched[p.scope] = true
	}
	c.mu.Unlock()
	var added []string
	var unwatched []ChildScope
	for _, s := range uncovered(recorded, current) {
		if watched[s] {
			continue
		}
		m, err := c.cfg.Mapper.ResourceFor(s.GroupVersionKind)
		if errors.Is(err, mapper.ErrNotFound) {
			continue
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot watch a kind the rule made children of; trying again", "rule", name, "scope", s.String())
			unwatched = append(unwatched, s)
			continue
		}
		ns := s.Namespace
		if !m.Namespaced {
			ns = metav1.NamespaceAll
		}
		key := watch.Key{GVR: m.GroupVersionResource(), Namespace: ns, Selector: childSelector}
		reg, err := c.watches.Acquire(key, c.ifCurrent(rs, c.childHandler(name, key)))
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot watch a kind the rule made children of; trying again", "rule", name, "scope", s.String())
			unwatched = append(unwatched, s)
			continue
		}
		c.mu.Lock()
		if !rs.active {
			c.mu.Unlock()
			reg.Release()
			return
		}
		rs.pruning = append(rs.pruning, &pruneWatch{scope: s, reg: reg, inherited: !slices.Contains(own, s)})
		if !slices.Contains(rs.gvrs, key.GVR) {
			rs.gvrs = append(rs.gvrs, key.GVR)
		}
		c.mu.Unlock()
		added = append(added, s.String())
	}
	c.mu.Lock()
	if rs.active {
		rs.unwatched = unwatched
	}
	c.mu.Unlock()
	if len(added) > 0 {
		klog.FromContext(ctx).Info("Watching where the rule made children it no longer makes, to prune them", "rule", name, "scopes", added)
	}
}

// recordScopesOf returns what the record should hold for a rule state: its
// scopes, those it still prunes and those it could not watch yet. The
// caller holds Controller.mu.
func recordScopesOf(rs *ruleState) []ChildScope {
	out := slices.Clone(rs.scopes)
	for _, p := range rs.pruning {
		if !p.inherited {
			out = append(out, p.scope)
		}
	}
	out = append(out, rs.unwatched...)
	return sortScopes(out)
}

// writeRecord makes a rule state's child and parent scopes what the
// controller wants recorded for the rule, writes them to the Record unless
// it holds them already, and keeps in the state whether it could.
func (c *Controller) writeRecord(ctx context.Context, rs *ruleState) error {
	err := c.saveScopes(ctx, rs)
	if err == nil {
		err = c.saveParentScopes(ctx, rs)
	}
	if err == nil {
		err = c.saveRunning(ctx, rs)
	}
	c.mu.Lock()
	rs.recordErr = ""
	if err != nil {
		rs.recordErr = err.Error()
	}
	c.mu.Unlock()
	return err
}

func (c *Controller) saveScopes(ctx context.Context, rs *ruleState) error {
	name := rs.rule.Name
	c.mu.Lock()
	want := sortScopes(append(recordScopesOf(rs), c.record.fresh[name]...))
	if c.record.want == nil {
		c.record.want = map[string][]ChildScope{}
	}
	c.record.want[name] = want
	c.mu.Unlock()
	// The Record is not written before it was read: the write would
	// drop what it holds from before kgen started.
	if err := c.loadRecord(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	// A Record read just now (here or by another rule) adds the scopes it
	// holds; they are kept until watchRecorded, at the next pass, watches
	// them.
	want = sortScopes(append(want, c.record.fresh[name]...))
	c.record.want[name] = want
	saved := c.record.saved[name]
	c.mu.Unlock()
	now, wrote, err := c.writeScopes(name, want, saved, func(r Record, add, remove []ChildScope) ([]ChildScope, error) {
		return r.Update(ctx, name, add, remove)
	})
	if err != nil || !wrote {
		return err
	}
	c.mu.Lock()
	c.record.saved[name] = now
	if others := minus(now, want); len(others) > 0 {
		// Scopes other replicas recorded since this one read the Record:
		// kept, as scopes read from it are (see loadRecord).
		c.record.fresh[name] = sortScopes(append(c.record.fresh[name], others...))
		c.record.want[name] = sortScopes(append(c.record.want[name], others...))
	}
	c.mu.Unlock()
	klog.FromContext(ctx).Info("Recorded where the rule's children may be", "rule", name, "scopes", encodeScopes(now))
	return nil
}

// saveRunning records the version of a started rule, unless the Record
// holds it already (or was not read yet), or a newer version of the rule
// started since: the pass of the version it replaces must not write the
// older version back. Under sharding every replica that runs the rule
// writes it: one value, written by the first.
func (c *Controller) saveRunning(ctx context.Context, rs *ruleState) error {
	rule := rs.rule
	version := rule.Version()
	c.mu.Lock()
	current, next := c.rules[rule.Name], c.pending[rule.Name]
	superseded := current != rs && next != rs || current == rs && next != nil && next.active
	// A version an older kgen recorded without its document gains it.
	recorded := c.record.running[rule.Name] == version && (c.record.documented[rule.Name] || rule.Document() == nil)
	skip := !c.record.loaded || version == "" || recorded || superseded
	c.mu.Unlock()
	if skip || c.cfg.Record == nil {
		return nil
	}
	if err := c.cfg.Record.UpdateRunning(ctx, rule.Name, version, rule.Document()); err != nil {
		return err
	}
	c.mu.Lock()
	c.record.running[rule.Name] = version
	c.record.documented[rule.Name] = rule.Document() != nil
	c.mu.Unlock()
	return nil
}

// forgetRemovedVersions removes from the Record the running versions of
// rules that are no longer loaded, once every rule is: a rule added again
// later has not run before, as far as kgen knows. Under sharding only the
// replica that removes scopes from the rule's record does.
func (c *Controller) forgetRemovedVersions(ctx context.Context) {
	if c.cfg.Record == nil || c.cfg.RulesLoaded != nil && !c.cfg.RulesLoaded() {
		return
	}
	c.mu.Lock()
	var gone []string
	for name := range c.record.running {
		if c.rules[name] == nil && c.pending[name] == nil && c.removesFromRecord(name) {
			gone = append(gone, name)
		}
	}
	c.mu.Unlock()
	for _, name := range gone {
		if err := c.cfg.Record.UpdateRunning(ctx, name, "", nil); err != nil {
			c.logRecordError(ctx, name, err)
			continue
		}
		// What the Record holds now, also if the rule came back
		// meanwhile: its next pass records it again.
		c.mu.Lock()
		delete(c.record.running, name)
		delete(c.record.documented, name)
		c.mu.Unlock()
	}
}

// ranBefore tells whether the Record says this version of the rule ran
// before: it started, and kgen has not started another version of it
// since. It reads the Record first unless it was read; one it cannot
// read says nothing ran.
func (c *Controller) ranBefore(ctx context.Context, rule *rules.Rule) bool {
	if err := c.loadRecord(ctx); err != nil {
		c.logRecordError(ctx, rule.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return rule.Version() != "" && c.record.running[rule.Name] == rule.Version()
}

// writeScopes writes to the Record what this replica learned of a rule's
// scopes, with update (Record.Update or UpdateParents): the scopes it wants
// that saved (what the Record held when last read or written) lacks, and
// those saved holds that it no longer wants, if it may remove them
// (removesFromRecord). It returns what the Record holds now, and whether
// there was anything to write.
func (c *Controller) writeScopes(rule string, want, saved []ChildScope, update func(r Record, add, remove []ChildScope) ([]ChildScope, error)) ([]ChildScope, bool, error) {
	add := minus(want, saved)
	var remove []ChildScope
	if c.removesFromRecord(rule) {
		remove = minus(saved, want)
	}
	if len(add) == 0 && len(remove) == 0 {
		return saved, false, nil
	}
	if c.cfg.Record == nil {
		return want, true, nil
	}
	now, err := update(c.cfg.Record, add, remove)
	if err != nil {
		return nil, false, err
	}
	return now, true, nil
}

// removesFromRecord tells whether this replica removes scopes from a
// rule's record, after it judged them empty or swept them: always without
// sharding (only the leader writes the record); under sharding only the
// shard that the ring gives the rule (the one that writes the Rule's
// status), which judges a prune-only scope empty against every parent of
// the rule, not only its own. The others only add scopes: so no replica
// drops a scope that another still needs.
func (c *Controller) removesFromRecord(rule string) bool {
	return c.shards == nil || c.shards.Owner(shard.Key(ruleResource, "", rule)) == c.shards.ID()
}

// ruleResource is the resource of Rule objects, whose key the ring gives
// the shard that writes a rule's status (see pkg/manager).
var ruleResource = schema.GroupResource{Group: "kgen.dev", Resource: "rules"}

// recordStarted records a started rule's scopes before any of its parents
// is reconciled, so that a child is not made of a kind the record lacks.
// When the Record cannot be read or written (kgen's RBAC lacks the
// ConfigMap, as under a chart older than the record), the rule runs anyway
// and prunePass tries again: the rule's state and the log say why, kinds
// that leave the rule while kgen runs are still pruned, but children of a
// kind that leaves it while kgen is stopped may not be.
func (c *Controller) recordStarted(ctx context.Context, rs *ruleState) {
	if err := c.writeRecord(ctx, rs); err != nil {
		c.logRecordError(ctx, rs.rule.Name, err)
	}
}

// prunePass, for every running rule: watches the scopes recorded for it
// that it does not watch yet (from a Record read late, or that could not
// be watched before); drops the prune-only informers that hold no child of
// the rule's parents any more (on two passes in a row, so that a reconcile
// in flight cannot make one behind its back); and writes its record if its
// scopes changed, or the last write failed.
func (c *Controller) prunePass(ctx context.Context) {
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	var states []*ruleState
	for _, rs := range c.rules {
		if rs.active && rs.synced {
			states = append(states, rs)
		}
	}
	c.mu.Unlock()
	for _, rs := range states {
		c.watchRecorded(ctx, rs)
		// Under sharding this replica caches only its own parents; the
		// replica that removes scopes from the rule's record judges them
		// against every parent of the rule (allParents), read only when
		// its own parents have no child left in a scope that still holds
		// some of kgen's objects.
		var all []string
		if c.shards != nil && c.removesFromRecord(rs.rule.Name) && c.mayBeEmpty(rs) {
			var err error
			if all, err = c.allParents(ctx, rs); err != nil {
				logger.Error(err, "Cannot list the rule's parents to see whether a kind that left it still has children; trying again", "rule", rs.rule.Name)
				all = nil
			}
		}
		var dropped []*watch.Registration
		c.mu.Lock()
		if len(rs.pruning) > 0 {
			uids := parentUIDs(rs)
			kept := rs.pruning[:0]
			for _, p := range rs.pruning {
				switch {
				case p.inherited && !p.reg.HasSynced() && reasonOf(c.watchErrLocked(p.reg.Informer().Key()).err) == "Forbidden":
					// A removed rule's scope kgen may not list (its
					// grants went with it): not this rule's to wait on.
					// Two passes, so an error left from an earlier
					// informer of the key does not count.
					if p.refusals++; p.refusals < 2 {
						break
					}
					settle(rs, p.scope)
					dropped = append(dropped, p.reg)
					logger.Info("Cannot watch where a removed rule made children, to prune those of this rule's parents; the rule's next version, or kgen's next start, tries again", "rule", rs.rule.Name, "scope", p.scope.String())
					continue
				case !p.reg.HasSynced() || holdsUncovered(p, rs.scopes, uids) || holdsUncovered(p, rs.scopes, all):
					p.empty = false
				case p.empty:
					if p.inherited {
						// The removed rule's entry keeps it in the
						// record: not watched again by this version.
						settle(rs, p.scope)
					}
					dropped = append(dropped, p.reg)
					logger.Info("No child of the rule is left where it no longer makes children; stopped watching there", "rule", rs.rule.Name, "scope", p.scope.String())
					continue
				default:
					p.empty = true
				}
				kept = append(kept, p)
			}
			rs.pruning = kept
		}
		c.mu.Unlock()
		for _, reg := range dropped {
			reg.Release()
		}
		if err := c.writeRecord(ctx, rs); err != nil {
			c.logRecordError(ctx, rs.rule.Name, err)
		}
	}
	c.forgetRemovedVersions(ctx)
}

// mayBeEmpty tells whether a prune-only informer of a rule state holds no
// child of its cached parents but some other object (of another shard's
// parent, or another rule's).
func (c *Controller) mayBeEmpty(rs *ruleState) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	uids := parentUIDs(rs)
	for _, p := range rs.pruning {
		indexer := p.reg.Informer().Indexer()
		if p.reg.HasSynced() && !holdsUncovered(p, rs.scopes, uids) && len(indexer.ListKeys()) > 0 {
			return true
		}
	}
	return false
}

// allParents returns the UIDs of every parent of a rule, whichever shard
// has it: a list of its parent kind with the rule's selector where it
// watches, from the API server's watch cache.
func (c *Controller) allParents(ctx context.Context, rs *ruleState) ([]string, error) {
	c.mu.Lock()
	mapping := rs.parent
	namespaces := slices.Sorted(maps.Keys(rs.parentRegs))
	c.mu.Unlock()
	res := c.cfg.Client.Resource(mapping.GroupVersionResource())
	var out []string
	for _, ns := range namespaces {
		var ri dynamic.ResourceInterface = res
		if mapping.Namespaced && ns != "" {
			ri = res.Namespace(ns)
		}
		list, err := ri.List(ctx, metav1.ListOptions{LabelSelector: rs.rule.Parent.Selector.String(), ResourceVersion: "0"})
		if err != nil {
			return nil, fmt.Errorf("list the parents of rule %s: %w", rs.rule.Name, err)
		}
		for i := range list.Items {
			out = append(out, string(list.Items[i].GetUID()))
		}
	}
	return out, nil
}

// parentUIDs returns the UIDs of a rule state's cached parents; the caller
// holds c.mu.
func parentUIDs(rs *ruleState) []string {
	var out []string
	for _, reg := range rs.parentRegs {
		for _, obj := range reg.Informer().Indexer().List() {
			if m, ok := obj.(metav1.Object); ok {
				out = append(out, string(m.GetUID()))
			}
		}
	}
	return out
}

// holdsChildOf tells whether a child informer's cache holds a child of one
// of the parents.
// holdsUncovered tells whether a prune-only informer holds a child of one
// of the parents where the rule no longer makes children: a child in a
// namespace that a scope the rule has now covers (a rule narrowed from
// every namespace to some) is watched by the rule's own informer there,
// and would keep the prune-only one for good.
func holdsUncovered(p *pruneWatch, current []ChildScope, parents []string) bool {
	indexer := p.reg.Informer().Indexer()
	for _, uid := range parents {
		objs, err := indexer.ByIndex(indexParent, uid)
		if err != nil {
			continue
		}
		for _, obj := range objs {
			m, ok := obj.(metav1.Object)
			if !ok {
				return true
			}
			at := ChildScope{GroupVersionKind: p.scope.GroupVersionKind, Namespace: m.GetNamespace()}
			if !slices.ContainsFunc(current, func(s ChildScope) bool { return s.covers(at) }) {
				return true
			}
		}
	}
	return false
}

// pruneScopesOf returns the scopes a rule state prunes, for its State.
func pruneScopesOf(rs *ruleState) []string {
	out := make([]string, 0, len(rs.pruning))
	for _, p := range rs.pruning {
		out = append(out, p.scope.String())
	}
	return out
}
