package reconcile

// The labels and annotation every rendered child carries. The watcher and the
// controller select children with them; a child's identity is the triple
// (LabelRule, LabelParentUID, LabelChild).
const (
	// LabelManagedBy marks every object kgen manages, with value ManagedBy.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of LabelManagedBy on kgen's children.
	ManagedBy = "kgen"
	// LabelRule holds the name of the rule that renders the child.
	LabelRule = "kgen.dev/rule"
	// LabelParentUID holds the UID of the child's parent.
	LabelParentUID = "kgen.dev/parent-uid"
	// LabelChild holds the child's id within its rule.
	LabelChild = "kgen.dev/child"
	// LabelShard assigns a parent to one replica of 'kgenctl run --shards'
	// (see pkg/shard). A child carries its parent's value, or none when
	// the parent has none, so each replica watches only its own children.
	// The template hash leaves it out: a parent that moves to another
	// replica changes its children's label, not their template.
	LabelShard = "kgen.dev/shard"
	// AnnotationParent holds the parent's "namespace/name", or "name" for a
	// cluster-scoped parent, so a child without an ownerReference (another
	// namespace, or a cluster-scoped child of a namespaced parent) still
	// leads back to its parent.
	AnnotationParent = "kgen.dev/parent"
	// AnnotationDeletionPolicy marks a child whose deletionPolicy is
	// Orphan: when it is no longer wanted, or its parent goes, kgen removes
	// its marks instead of deleting it. The mark is on the object, so it
	// holds after the rule changes or kgen restarts.
	AnnotationDeletionPolicy = "kgen.dev/deletion-policy"
	// AnnotationServiceAccount marks a child of a rule with
	// spec.serviceAccount with that ServiceAccount's "namespace/name":
	// kgen deletes the child, or lets it go, as that ServiceAccount even
	// once the rule is gone (removed, its parent then released), so a
	// removed rule can do no more than it could (contract section 7).
	AnnotationServiceAccount = "kgen.dev/service-account"
	// AnnotationOrphanedFrom is the one mark kgen leaves on a child it let
	// go of (deletionPolicy Orphan): its parent then, as JSON
	// ({"apiVersion", "kind", "namespace", "name", "uid"}). Nothing acts on
	// it, neither kgen nor the garbage collector; it only lets a parent
	// that renders the object again take it back: the same parent, or one
	// that replaced a parent that no longer exists. A user who takes the
	// object over removes it, and the object is theirs.
	AnnotationOrphanedFrom = "kgen.dev/orphaned-from"
)
