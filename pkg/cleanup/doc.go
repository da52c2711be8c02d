// Package cleanup undoes what a running kgen leaves on the cluster that
// would outlive it: it stops kgen's Deployment, then removes kgen's
// finalizer, kgen.dev/cleanup, from every parent of the rules, those of
// kgen's rules files and of the cluster's Rule objects. The Helm chart runs
// it (kgenctl cleanup) as a pre-delete hook, so that after 'helm uninstall'
// no parent is stuck Terminating waiting for a kgen that is gone.
//
// Release looks at every object of each rule's parent kind, in the rule's
// namespaces when it is limited to some, whatever its labels: a parent
// relabelled out of a rule's selector may still carry the finalizer. Rule
// objects are read as kgen serves them: one that a file rule's name
// shadows is left out, and an invalid one counts by the parent kind it
// names, since kgen may have run an earlier version of it. With kgen's
// record (Sources.Record), it also looks where the record says rules
// watched their parents and no rule of the sources looks: the parents of
// a rule removed before kgen could release them. A parent of another kgen
// (a second chart release whose rules share the parent kind) is left as a
// running kgen leaves it: one that no rule selects and whose children,
// listed where the record says this kgen's rules made children, all name
// rules this kgen neither ran nor recorded (Release says more). It removes only kgen's
// entry, with a JSON patch that first tests the entry
// is where it was read, so other controllers' finalizers, even ones added
// meanwhile, are kept. Children are not touched: like a rule that is
// removed, an uninstalled kgen leaves its children where they are.
//
// StopDeployment scales kgen's Deployment to zero and waits until its pods
// are gone. Release must run after it: a running kgen puts the finalizer
// back on the next reconcile of the parent, which the removal itself
// triggers.
//
// The package knows nothing of Helm; it needs list and patch on the
// parents, list on rules.kgen.dev for Rule objects, get on the record's
// ConfigMap and list on the recorded child kinds, and for StopDeployment
// get and update on deployments/scale and list on pods.
package cleanup
