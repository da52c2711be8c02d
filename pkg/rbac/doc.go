// Package rbac works out the least-privileged Kubernetes RBAC rules that kgen
// needs to run a set of rules, from what the reconciler really calls:
//
//   - parents: get, list, watch (informers); patch, for kgen's cleanup
//     finalizer (server-side apply of the parent itself): put on a parent
//     whose rule has a child where an ownerReference cannot be (a
//     namespaced parent with a cluster-scoped or cross-namespace child),
//     and removed by every rule, also one that never puts it, from parents
//     an earlier version of the rule (or another rule) left it on; for a
//     rule limited to namespaces whose parents may hold it, that patch is
//     cluster-wide, as deleting a namespace deletes kgen's Role there in
//     no set order with the parents; get, by name, on the namespaces a
//     rule names (of its parents, of children it lets live elsewhere, of
//     inputs: kgen and kgenctl cleanup tell one that is gone);
//     patch on the status subresource (server-side apply), when the kind has
//     one; update on the finalizers subresource, which is never called but is
//     what the OwnerReferencesPermissionEnforcement admission plugin checks
//     before it lets kgen set blockOwnerDeletion on a child's ownerReference.
//   - children: get (only after an AlreadyExists conflict), list, watch,
//     create, patch (server-side apply) and delete (pruning). Never update.
//     A RoleBinding or ClusterRoleBinding child also needs bind on the role it
//     references, since RBAC forbids granting what one does not hold.
//   - inputs (spec.inputs): list and watch, where they can be.
//   - events: create and patch, where the parents are (Events of a
//     cluster-scoped parent go to the default namespace).
//   - the CustomResourceDefinition of a parent kind that is not built in:
//     get, by name (kgen checks the rule's expressions against its schema
//     when the rule starts); with Options.ManageCRDs, also create and
//     patch on the CRD of every rule with spec.parent.schema.
//
// Where is the rule's Placement (rules.Rule.Placement), as the controller
// watches and the renderer writes: a rule whose namespaced parent is limited
// to namespaces (spec.parent.namespaces) gets Roles in those namespaces
// instead of ClusterRole rules, for its parent, its events and its
// namespaced children, which live there or in the namespaces its templates
// name or spec.allowCrossNamespace lists. Everything else is in one
// ClusterRole. kgen's own objects are not a rule's business: Manifests adds
// Roles in kgen's own namespace for its record of the rules' child kinds
// (the ConfigMap kgen-state, StateRules) and the leader-election Lease.
//
// Kinds are resolved to resources by a Resolver: discovery (a live cluster),
// or offline by kinds.Static (built-in kinds, CustomResourceDefinition files
// and resources the user names). The package never guesses a plural.
package rbac
