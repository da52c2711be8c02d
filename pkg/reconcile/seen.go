package reconcile

import (
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// seenChildren remembers, per parent, the children that existed after its
// last reconcile. A child missing now that existed then was deleted by
// someone else, and creating it again repairs drift: a Repaired event. A
// child never seen is new: one the rule gained, the children of a parent
// that moved to the rule, an includeWhen that turned true, a renamed child,
// a create that failed before. kgen forgets on a restart: a child deleted
// while it was down is created again with a Created event.
type seenChildren struct {
	mu      sync.Mutex
	parents map[types.UID]map[childRef]struct{}
}

// childRef is a child as the Repaired event means it: the object of one
// child id.
type childRef struct {
	id              string
	kind            schema.GroupKind
	namespace, name string
}

func refOf(id string, obj *unstructured.Unstructured) childRef {
	return childRef{id: id, kind: obj.GroupVersionKind().GroupKind(), namespace: obj.GetNamespace(), name: obj.GetName()}
}

func newSeenChildren() *seenChildren {
	return &seenChildren{parents: map[types.UID]map[childRef]struct{}{}}
}

// set records the children that exist after a reconcile of the parent.
func (s *seenChildren) set(parent types.UID, live []*unstructured.Unstructured) {
	refs := make(map[childRef]struct{}, len(live))
	for _, obj := range live {
		refs[refOf(obj.GetLabels()[LabelChild], obj)] = struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.parents[parent] = refs
}

// had reports whether the child existed after the parent's last reconcile.
func (s *seenChildren) had(parent types.UID, child childRef) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.parents[parent][child]
	return ok
}

func (s *seenChildren) forget(parent types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.parents, parent)
}

// retain forgets the parents live does not accept: a parent may go without
// a Forget (a reconcile that ended after it was deleted, a rule removed).
func (s *seenChildren) retain(live func(types.UID) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid := range s.parents {
		if !live(uid) {
			delete(s.parents, uid)
		}
	}
}
