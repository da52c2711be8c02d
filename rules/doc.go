// Package rules loads kgen's rules files and compiles the expressions in
// them.
//
// A rules file holds YAML documents, each a Rule (apiVersion
// kgen.dev/v1alpha1): a parent kind and the templated children every parent
// of that kind gets. Load reads files and directories (their *.yaml and
// *.yml files). Decoding is strict: an unknown field, a duplicate key, a
// value of the wrong type is an error. Validation checks names and child ids,
// kinds, label selectors, the namespace policy and the children's
// dependencies. Load reports every problem it finds, each an *Error with
// the file, line, column, rule, child id, field and expression.
//
// Strings in templates, includeWhen, readyWhen and status fields may hold
// ${...} CEL expressions, compiled and type-checked once, at load time, with
// cel-go and the Kubernetes CEL libraries of Kubernetes 1.36 (strings,
// lists, sets, regex, URLs, IPs and CIDRs, quantities, semver, format,
// optionals, two-variable comprehensions). The variables are parent (the
// parent object), children (children.<id>: an observed child) and self (the
// child itself, in readyWhen only); each is a map(string, dyn), so field
// access is checked at run time. Uses of children name their child id
// literally, which makes the children's dependency graph known at load time.
// An expression that reads metadata.resourceVersion or metadata.managedFields
// (or a whole object or its whole metadata, which hold them) is rejected:
// they change with every write, kgen's own included, so kgen would write in
// a loop.
//
// A string that is exactly one ${...} takes the type of its result; a string
// with text around expressions interpolates them (see Template.Evaluate for
// the conversions). Results are data: they are never parsed again, so a
// parent field holding "${...}" or YAML text ends up as that literal string.
//
// Evaluation is bounded: each expression by a CEL cost limit, each rendered
// template by an output size (Options); going over is an error matching
// ErrLimitExceeded, never a hang.
//
// Rule.Placement is the one answer to "where do a rule's parents, children
// and events live, and which children get an ownerReference or need the
// parent's finalizer", given the scope of its kinds (a kinds.Scoper): the
// renderer, pkg/rbac and the controller's watches all use it.
//
// The package knows nothing else of clusters: the metadata kgen adds to
// children and the order of applying them are pkg/reconcile's.
package rules
