package controller

import (
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"kgen.dev/kgen/pkg/mapper"
	"kgen.dev/kgen/pkg/reconcile"
	"kgen.dev/kgen/pkg/watch"
	"kgen.dev/kgen/rules"
)

// scoper answers scope questions from discovery, as kinds.Scoper.
type scoper struct{ m *mapper.Mapper }

func (s scoper) Namespaced(gvk schema.GroupVersionKind) (bool, error) {
	m, err := s.m.ResourceFor(gvk)
	return m.Namespaced, err
}

func sortedKinds(m map[schema.GroupVersionKind][]string) []schema.GroupVersionKind {
	out := slices.Collect(maps.Keys(m))
	slices.SortFunc(out, func(a, b schema.GroupVersionKind) int {
		if a.String() < b.String() {
			return -1
		}
		if a.String() > b.String() {
			return 1
		}
		return 0
	})
	return out
}

// readKey names what a parent reads: one object (Name set) or the objects
// of a namespace that a selector picks.
type readKey struct {
	kind      schema.GroupKind
	namespace string
	name      string
}

// read is one input a parent read, for the index of readers.
type read struct {
	key      readKey
	selector labels.Selector // nil for a named input
	// matched are the objects a selector matched, "namespace/name": one
	// that stops matching still concerns the parent.
	matched map[string]bool
}

// Inputs reads a rule's inputs for a parent from the input informers: the
// object of a named input (none when it does not exist), the objects a
// selector input matches. It makes the Controller the reconciler's
// InputReader, and records what the parent read, so that a change to an
// input queues exactly the parents that read it.
func (c *Controller) Inputs(rule *rules.Rule, parent *unstructured.Unstructured) (map[string][]*unstructured.Unstructured, error) {
	refs, err := rule.InputRefs(parent, scoper{c.cfg.Mapper})
	if err != nil {
		return nil, &reconcile.RenderError{Rule: rule.Name, Err: err}
	}
	c.mu.Lock()
	rs := c.rules[rule.Name]
	var regs []*watch.Registration
	if rs != nil {
		regs = rs.inputRegs
	}
	c.mu.Unlock()
	out := map[string][]*unstructured.Unstructured{}
	var reads []read
	for _, ref := range refs {
		m, err := c.cfg.Mapper.ResourceFor(ref.GroupVersionKind)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", ref.ID, err)
		}
		r := read{key: readKey{kind: ref.GroupVersionKind.GroupKind(), namespace: ref.Namespace, name: ref.Name}, selector: ref.Selector}
		if ref.Name == "" {
			r.matched = map[string]bool{}
		}
		for _, reg := range regs {
			inf := reg.Informer()
			if inf.Key().GVR != m.GroupVersionResource() || (inf.Key().Namespace != "" && inf.Key().Namespace != ref.Namespace) {
				continue
			}
			if ref.Name != "" {
				obj, err := inf.Get(ref.Namespace, ref.Name)
				if err != nil {
					return nil, err
				}
				if obj != nil {
					out[ref.ID] = append(out[ref.ID], obj)
				}
				break
			}
			var objs []any
			if ref.Namespace == "" {
				objs = inf.Indexer().List()
			} else if objs, err = inf.Indexer().ByIndex(cache.NamespaceIndex, ref.Namespace); err != nil {
				return nil, err
			}
			for _, o := range objs {
				meta, ok := o.(metav1.Object)
				if !ok || !ref.Selector.Matches(labels.Set(meta.GetLabels())) {
					continue
				}
				obj, err := watch.Decode(o)
				if err != nil {
					return nil, err
				}
				out[ref.ID] = append(out[ref.ID], obj)
				r.matched[obj.GetNamespace()+"/"+obj.GetName()] = true
			}
			break
		}
		reads = append(reads, r)
	}
	c.recordReads(Key{Rule: rule.Name, Namespace: parent.GetNamespace(), Name: parent.GetName()}, reads)
	return out, nil
}

// recordReads replaces what a parent is recorded to read.
func (c *Controller) recordReads(parent Key, reads []read) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.readsOf[parent] {
		if readers := c.readers[r.key]; readers != nil {
			delete(readers, parent)
			if len(readers) == 0 {
				delete(c.readers, r.key)
			}
		}
	}
	if len(reads) == 0 {
		delete(c.readsOf, parent)
		return
	}
	c.readsOf[parent] = reads
	for _, r := range reads {
		k := r.key
		if r.selector != nil {
			k.name = "" // selector reads are found by kind and namespace
		}
		if c.readers[k] == nil {
			c.readers[k] = map[Key]read{}
		}
		c.readers[k][parent] = r
	}
}

// forgetReads drops what a parent that is gone read.
func (c *Controller) forgetReads(parent Key) { c.recordReads(parent, nil) }

// inputHandler queues the parents of the rule that read an input object
// that changed: those that read it by name, and those whose selector in its
// namespace (or in every namespace) matches it.
func (c *Controller) inputHandler(rule string) watch.Handler {
	return func(obj metav1.Object, _ bool) {
		gk := schema.FromAPIVersionAndKind(apiVersionKind(obj)).GroupKind()
		var queue []Key
		c.mu.Lock()
		for parent := range c.readers[readKey{kind: gk, namespace: obj.GetNamespace(), name: obj.GetName()}] {
			queue = append(queue, parent)
		}
		for _, ns := range []string{obj.GetNamespace(), metav1.NamespaceAll} {
			for parent, r := range c.readers[readKey{kind: gk, namespace: ns}] {
				if r.selector != nil && (r.selector.Matches(labels.Set(obj.GetLabels())) || r.matched[obj.GetNamespace()+"/"+obj.GetName()]) {
					queue = append(queue, parent)
				}
			}
		}
		c.mu.Unlock()
		for _, k := range queue {
			if k.Rule == rule {
				c.queue.Add(k)
			}
		}
	}
}

// apiVersionKind returns a cached object's apiVersion and kind.
func apiVersionKind(obj metav1.Object) (string, string) {
	if t, ok := obj.(interface{ GetObjectKind() schema.ObjectKind }); ok {
		return t.GetObjectKind().GroupVersionKind().ToAPIVersionAndKind()
	}
	return "", ""
}

var _ reconcile.InputReader = (*Controller)(nil)
