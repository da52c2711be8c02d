package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

// Parents that move between rules.
//
// Two rules of one kind never select the same parent (rules.Load refuses
// them), but a parent relabelled from one rule's selector into another's
// is, for a moment, in both rules' caches: each informer hears of the
// change on its own watch. The rule whose cache is behind must not
// reconcile the old version, or the two rules would undo each other's work
// (the old rule recreating what the new one just pruned). So a rule
// reconciles a parent only when no other rule's cache holds a later version
// of it (see behind); the rule whose cache is behind hears of the later
// version on its own watch soon, as an update or as the parent leaving.
//
// The new rule finds the children the old one made through the caches of
// every rule (Controller.Children), also those of kinds it does not watch
// itself, so it prunes them and keeps kgen's finalizer until they are
// gone; and their events reach it through the old rule's informers
// (childHandler). A child both rules make (same id, same name) is the
// parent's (by its UID), so the new rule updates it in place.

// behind reports whether another rule's cache holds a later version of the
// parent (same UID) than the one a rule's cache gave.
func (c *Controller) behind(rule string, parent *unstructured.Unstructured) bool {
	key, err := cache.MetaNamespaceKeyFunc(parent)
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, rs := range c.rules {
		if name == rule || !rs.active || rs.rule.Parent.GroupVersionKind.GroupKind() != parent.GroupVersionKind().GroupKind() {
			continue
		}
		reg := rs.parentRegs[parent.GetNamespace()]
		if reg == nil {
			reg = rs.parentRegs[""]
		}
		if reg == nil {
			continue
		}
		cached, ok, err := reg.Informer().Indexer().GetByKey(key)
		if err != nil || !ok {
			continue
		}
		if m, ok := cached.(metav1.Object); ok && m.GetUID() == parent.GetUID() && newerVersion(m.GetResourceVersion(), parent.GetResourceVersion()) {
			return true
		}
	}
	return false
}
